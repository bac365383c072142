# Renders every template here with Jinja2 as Hugging Face's apply_chat_template sets
# it up (trim_blocks, lstrip_blocks, loopcontrols, raise_exception) and writes
# golden.json, which TestChatTemplatesMatchJinja2 compares the server's rendering
# with. Regenerate with: python3 golden.py (Jinja2 3.1.6 made the committed file).
import glob, json, os
from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

def raise_exception(message):
    raise TemplateError(message)

env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.globals["raise_exception"] = raise_exception
conversations = {
    "user": [{"role": "user", "content": "  Hello there  "}],
    "system_user": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Write a Go func."}],
    "multi": [{"role": "system", "content": "S"}, {"role": "user", "content": "a"}, {"role": "assistant", "content": " b "}, {"role": "user", "content": "c"}],
    "bad_alternation": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
}
cases = []
here = os.path.dirname(os.path.abspath(__file__))
for path in sorted(glob.glob(os.path.join(here, "*.jinja"))):
    template = env.from_string(open(path).read())
    for name, messages in conversations.items():
        for agp in (True, False):
            case = {"template": os.path.basename(path), "conversation": name, "add_generation_prompt": agp}
            try:
                case["output"] = template.render(messages=messages, add_generation_prompt=agp, bos_token="<s>", eos_token="</s>")
            except TemplateError as e:
                case["error"] = str(e)
            cases.append(case)
with open(os.path.join(here, "golden.json"), "w") as f:
    json.dump({"conversations": conversations, "cases": cases}, f, indent=1)
    f.write("\n")
print(len(cases), "cases")
