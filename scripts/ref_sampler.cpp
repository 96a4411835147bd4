// llama.cpp's sampler chain (top_k -> top_p -> min_p -> temp -> dist(seed)) over fixed logits:
// reads CASES_FILE, one case a line: "seed top_k top_p min_p temp n_draws n_vocab logit...";
// prints, a line per case, the n_draws tokens the chain selects, one chain (one RNG) a case.
#include "llama.h"
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
int main(int argc, char ** argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s CASES_FILE\n", argv[0]); return 2; }
    std::ifstream in(argv[1]);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream ss(line);
        unsigned seed; int top_k, n_draws, n_vocab; float top_p, min_p, temp;
        ss >> seed >> top_k >> top_p >> min_p >> temp >> n_draws >> n_vocab;
        std::vector<float> logits(n_vocab);
        for (auto & x : logits) ss >> x;
        llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(top_k));
        llama_sampler_chain_add(chain, llama_sampler_init_top_p(top_p, 1));
        llama_sampler_chain_add(chain, llama_sampler_init_min_p(min_p, 1));
        llama_sampler_chain_add(chain, llama_sampler_init_temp(temp));
        llama_sampler_chain_add(chain, llama_sampler_init_dist(seed));
        for (int d = 0; d < n_draws; ++d) {
            std::vector<llama_token_data> data(n_vocab);
            for (int i = 0; i < n_vocab; ++i) data[i] = {i, logits[i], 0.0f};
            llama_token_data_array cur = {data.data(), data.size(), -1, false};
            llama_sampler_apply(chain, &cur);
            printf(d + 1 < n_draws ? "%d " : "%d\n", cur.data[cur.selected].id);
        }
        llama_sampler_free(chain);
    }
    return 0;
}
