// Every position's logits from llama.cpp for one sequence: reads token ids (one line, spaces)
// from IDS_FILE, decodes them as one sequence in ubatches of N_UBATCH (n_ctx 2048, like
// tests/test_gemma3.py's llamapy run), writes n_tokens x n_vocab float32 rows to OUT.
#include "llama.h"
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>
static void quiet(ggml_log_level, const char *, void *) {}
int main(int argc, char ** argv) {
    if (argc < 5) { fprintf(stderr, "usage: %s MODEL IDS_FILE OUT N_UBATCH\n", argv[0]); return 2; }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    std::ifstream in(argv[2]);
    std::vector<llama_token> ids;
    for (long v; in >> v;) ids.push_back((llama_token) v);
    const int n_ub = atoi(argv[4]);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 2048; cp.n_batch = n_ub; cp.n_ubatch = n_ub; cp.n_threads = 2; cp.n_threads_batch = 2;
    llama_context * ctx = llama_init_from_model(model, cp);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE * out = fopen(argv[3], "wb");
    for (size_t i0 = 0; i0 < ids.size(); i0 += n_ub) {
        const int n = (int) std::min(ids.size() - i0, (size_t) n_ub);
        llama_batch b = llama_batch_init(n, 0, 1);
        for (int j = 0; j < n; ++j) {
            b.token[j] = ids[i0 + j]; b.pos[j] = (llama_pos) (i0 + j); b.n_seq_id[j] = 1;
            b.seq_id[j][0] = 0; b.logits[j] = 1;
        }
        b.n_tokens = n;
        if (llama_decode(ctx, b) != 0) { fprintf(stderr, "decode failed at %zu\n", i0); return 1; }
        for (int j = 0; j < n; ++j) fwrite(llama_get_logits_ith(ctx, j), sizeof(float), n_vocab, out);
        llama_batch_free(b);
    }
    fclose(out);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
