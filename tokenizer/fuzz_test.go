package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/specula/specula/format/gguf"
)

// Seed corpora beyond the f.Add calls are in testdata/fuzz/<FuzzName>/.

// checkStream decodes ids with a Stream and compares with DecodeWith.
func checkStream(t *testing.T, tok *Tokenizer, ids []int32) {
	for _, opts := range []DecodeOptions{{}, {SkipSpecial: true}} {
		s := tok.NewStream(opts)
		var b strings.Builder
		for _, id := range ids {
			out := s.Push(id)
			if !utf8.ValidString(out) {
				t.Fatalf("stream returned invalid UTF-8 %q", out)
			}
			b.WriteString(out)
		}
		b.WriteString(s.Flush())
		if want := tok.DecodeWith(ids, opts); b.String() != want {
			t.Fatalf("stream %q, decode %q", b.String(), want)
		}
	}
}

// FuzzEncodeDecode: no input makes Encode or Decode panic; byte-level BPE gives any
// valid UTF-8 text back exactly; SentencePiece-style tokenizers do too for text
// without ▁ (which they use for spaces) and with special tokens off.
func FuzzEncodeDecode(f *testing.F) {
	for _, s := range []string{"", "Hello, world", "a  b\n\n\tc ", "<|endoftext|>x<|im_start|>", "<s></s><unk>",
		"'S 'll ſ 12345 ٣٤٥٦", "👨\u200d👩\u200d👧 🇫🇷", "e\u0301 ﬁ Å", "\xff\xfe", "▁x▁ ▁", "\r\n\r\n  x"} {
		f.Add(s)
	}
	byteLevel := []*Tokenizer{loadTestdata(f, "gocoder"), loadTestdata(f, "llama3")}
	qwen2 := loadTestdata(f, "qwen2")
	spStyle := []*Tokenizer{loadTestdata(f, "llama2")}
	sp, err := FromSentencePiece(miniSentencePiece())
	if err != nil {
		f.Fatal(err)
	}
	spStyle = append(spStyle, sp)
	metaspace := loadTestdata(f, "llama2-metaspace")
	f.Fuzz(func(t *testing.T, s string) {
		valid := utf8.ValidString(s)
		for _, tok := range byteLevel {
			for _, opts := range []EncodeOptions{{ParseSpecial: true}, {}} {
				ids := tok.Encode(s, opts)
				if got := tok.Decode(ids); valid && got != s {
					t.Fatalf("%+v: decode(encode(%q)) = %q", opts, s, got)
				}
				checkStream(t, tok, ids)
			}
		}
		ids := qwen2.Encode(s, EncodeOptions{})
		if got := qwen2.Decode(ids); valid && got != norm.NFC.String(s) {
			t.Fatalf("qwen2: decode(encode(%q)) = %q, want its NFC form", s, got)
		}
		checkStream(t, qwen2, qwen2.Encode(s, EncodeOptions{ParseSpecial: true}))
		for _, tok := range spStyle {
			ids := tok.Encode(s, EncodeOptions{})
			if got := tok.Decode(ids); valid && !strings.Contains(s, "▁") && got != s {
				t.Fatalf("decode(encode(%q)) = %q", s, got)
			}
			checkStream(t, tok, tok.Encode(s, tok.DefaultOptions()))
		}
		checkStream(t, metaspace, metaspace.Encode(s, metaspace.DefaultOptions()))
	})
}

// useTokenizer exercises a tokenizer that loaded from fuzzed input.
func useTokenizer(t *testing.T, tok *Tokenizer, texts ...string) {
	for _, s := range append(texts, "Hello world <s> <|endoftext|> 123 日本 🚀") {
		for _, opts := range []EncodeOptions{tok.DefaultOptions(), {}} {
			ids := tok.Encode(s, opts)
			for _, id := range ids {
				if !tok.valid(id) {
					t.Fatalf("encode(%q) gave id %d, not in the vocabulary of %d", s, id, tok.VocabSize())
				}
			}
			checkStream(t, tok, ids)
		}
	}
	checkStream(t, tok, []int32{0, 1, 2, 3, -1, int32(tok.VocabSize())})
	_ = tok.EOS()
	_, _ = tok.BOS()
	_ = Compatible(tok, tok)
}

func FuzzFromJSON(f *testing.F) {
	f.Add([]byte(miniJSON), []byte(nil))
	f.Add([]byte(miniJSON), []byte(`{"bos_token": {"content": "<|end|>"}, "add_bos_token": true}`))
	f.Add([]byte(strings.Replace(miniJSON, `"type": "ByteLevel", "add_prefix_space": false, "use_regex": true`,
		`"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "`+strings.ReplaceAll(patternLlama3, `\`, `\\`)+`"}, "behavior": "Isolated"}, {"type": "ByteLevel", "use_regex": false}]`, 1)), []byte(nil))
	f.Fuzz(func(t *testing.T, data, config []byte) {
		tok, err := FromJSON(data, config)
		if err != nil {
			if tok != nil {
				t.Fatal("a tokenizer and an error")
			}
			return
		}
		useTokenizer(t, tok, string(data))
	})
}

func FuzzFromSentencePiece(f *testing.F) {
	f.Add(miniSentencePiece())
	f.Add([]byte{0x0a, 0x05, 0x0a, 0x03, 'a', 'b', 'c'})
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := FromSentencePiece(data)
		if err != nil {
			return
		}
		useTokenizer(t, tok, string(data))
	})
}

func FuzzFromGGUF(f *testing.F) {
	f.Add(ggufBytes(f, miniGGUF("llama")))
	f.Add(ggufBytes(f, miniGGUF("gpt2")))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := gguf.Parse(data)
		if err != nil {
			return
		}
		tok, err := FromGGUF(g)
		if err != nil {
			return
		}
		useTokenizer(t, tok)
	})
}
