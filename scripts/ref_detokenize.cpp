// llama_detokenize for every line of token ids in argv[2]; prints 4 hex strings per line:
// (remove_special, unparse_special) = (0,0) (0,1) (1,0) (1,1)
#include "llama.h"
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
static void quiet(ggml_log_level, const char *, void *) {}
int main(int argc, char ** argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s MODEL IDS_FILE\n", argv[0]); return 2; }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::ifstream in(argv[2]);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ss(line);
        std::vector<llama_token> ids;
        for (long v; ss >> v;) ids.push_back((llama_token) v);
        for (int flags = 0; flags < 4; ++flags) {
            std::vector<char> buf(16 + 64 * ids.size());
            int n = llama_detokenize(vocab, ids.data(), ids.size(), buf.data(), buf.size(), flags & 2, flags & 1);
            if (n < 0) { buf.resize(-n); n = llama_detokenize(vocab, ids.data(), ids.size(), buf.data(), buf.size(), flags & 2, flags & 1); }
            for (int i = 0; i < n; ++i) printf("%02x", (unsigned char) buf[i]);
            printf(flags < 3 ? " " : "\n");
        }
    }
    llama_model_free(model);
    return 0;
}
