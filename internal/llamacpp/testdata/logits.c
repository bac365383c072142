// logits: llama.cpp's logits at every position of a token sequence, the reference
// specula's parity tests compare with (built and run by package internal/llamacpp).
//
//	logits MODEL.gguf BACKEND_DIR THREADS [N_CTX] < tokens > logits
//
// Standard input: the token count n, then n token ids, int32 little-endian. Standard
// output: n_vocab as int32, then n rows of n_vocab float32 logits. The key/value cache
// is float32 and flash attention off, so that llama.cpp's own rounding is as small as
// it can be. The context holds N_CTX positions (llama.cpp rounds it up to a multiple
// of 256), or as many as the tokens.
//
//	logits tokenize MODEL.gguf BACKEND_DIR ADD_SPECIAL PARSE_SPECIAL < texts > ids
//
// llama.cpp's tokenization of texts by the model's vocabulary (loaded alone, without
// the weights); ADD_SPECIAL and PARSE_SPECIAL are 0 or 1, llama_tokenize's flags.
// Standard input: the text count, then each text as its byte length and its bytes.
// Standard output: for each text, its token count and its token ids. All numbers are
// int32 little-endian.
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char * text, void * data) {
	(void) data;
	if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static void fail(const char * what) {
	fprintf(stderr, "logits: %s\n", what);
	exit(1);
}

static int32_t read_i32(void) {
	int32_t v = 0;
	if (fread(&v, 4, 1, stdin) != 1 || v < 0) fail("truncated input");
	return v;
}

static int tokenize(char ** argv) {
	bool add_special = atoi(argv[4]) != 0, parse_special = atoi(argv[5]) != 0;
	llama_log_set(quiet, NULL);
	ggml_backend_load_all_from_path(argv[3]);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.vocab_only = true;
	struct llama_model * model = llama_model_load_from_file(argv[2], mp);
	if (!model) fail("the model does not load");
	const struct llama_vocab * vocab = llama_model_get_vocab(model);
	int32_t n = read_i32();
	for (int32_t i = 0; i < n; i++) {
		int32_t len = read_i32();
		char * text = malloc((size_t) len + 1);
		if (len > 0 && fread(text, 1, (size_t) len, stdin) != (size_t) len) fail("truncated text");
		int32_t max = len + 8;
		llama_token * ids = malloc(4 * (size_t) max);
		int32_t got = llama_tokenize(vocab, text, len, ids, max, add_special, parse_special);
		if (got < 0 && got != INT32_MIN) {
			max = -got;
			ids = realloc(ids, 4 * (size_t) max);
			got = llama_tokenize(vocab, text, len, ids, max, add_special, parse_special);
		}
		if (got < 0) fail("llama_tokenize failed");
		fwrite(&got, 4, 1, stdout);
		fwrite(ids, 4, (size_t) got, stdout);
		free(ids);
		free(text);
	}
	llama_model_free(model);
	llama_backend_free();
	return 0;
}

int main(int argc, char ** argv) {
	if (argc == 6 && strcmp(argv[1], "tokenize") == 0) return tokenize(argv);
	if (argc != 4 && argc != 5) fail("usage: logits MODEL.gguf BACKEND_DIR THREADS [N_CTX] < tokens > logits");
	int threads = atoi(argv[3]);
	int32_t n_ctx = argc == 5 ? atoi(argv[4]) : 0;
	int32_t n = 0;
	if (fread(&n, 4, 1, stdin) != 1 || n <= 0) fail("no token count on standard input");
	int32_t * tokens = malloc(4 * (size_t) n);
	if (fread(tokens, 4, (size_t) n, stdin) != (size_t) n) fail("fewer tokens than the count");

	llama_log_set(quiet, NULL);
	ggml_backend_load_all_from_path(argv[2]);
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	struct llama_model * model = llama_model_load_from_file(argv[1], mp);
	if (!model) fail("the model does not load");
	int32_t vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = (uint32_t) (n_ctx > n ? n_ctx : n);
	cp.n_batch = (uint32_t) n;
	cp.n_ubatch = (uint32_t) n;
	cp.n_threads = threads;
	cp.n_threads_batch = threads;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	cp.type_k = GGML_TYPE_F32;
	cp.type_v = GGML_TYPE_F32;
	struct llama_context * ctx = llama_init_from_model(model, cp);
	if (!ctx) fail("no context");

	struct llama_batch b = llama_batch_init(n, 0, 1);
	for (int32_t i = 0; i < n; i++) {
		b.token[i] = tokens[i];
		b.pos[i] = i;
		b.n_seq_id[i] = 1;
		b.seq_id[i][0] = 0;
		b.logits[i] = 1;
	}
	b.n_tokens = n;
	if (llama_decode(ctx, b) != 0) fail("llama_decode failed");
	fwrite(&vocab, 4, 1, stdout);
	for (int32_t i = 0; i < n; i++) {
		fwrite(llama_get_logits_ith(ctx, i), 4, (size_t) vocab, stdout);
	}
	llama_batch_free(b);
	llama_free(ctx);
	llama_model_free(model);
	llama_backend_free();
	free(tokens);
	return 0;
}
