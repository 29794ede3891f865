/* Text from a trained run: its tokenizer and latest checkpoint loaded through the library, then
 * tokens drawn one at a time with the KV cache (each new token attends to the cached keys and
 * values of the ones before; the prefix is never recomputed).
 *
 *   tapegrad train --preset tiny --steps 200 --data notes.txt --out run
 *   ./generate run "Once upon" 200          (RUN [PROMPT [TOKENS]])
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tapegrad/tapegrad.h>

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s RUN_FOLDER_OR_CHECKPOINT [PROMPT [TOKENS]]\n", argv[0]);
        return 2;
    }
    const char *prompt = argc > 2 ? argv[2] : "\n";
    long tokens = argc > 3 ? strtol(argv[3], NULL, 10) : 200;
    if (tokens < 1) {
        fprintf(stderr, "generate: TOKENS must be a positive number, not '%s'\n", argv[3]);
        return 2;
    }
    TgPretrained run;
    if (tg_pretrained_open(argv[1], &run) != TG_OK) {
        fprintf(stderr, "generate: %s\n", tg_error_message());
        tg_pretrained_close(&run);
        return 1;
    }
    fprintf(stderr, "%s: step %lld, %lld parameters, %s tokenizer of %d ids\n", run.checkpoint, (long long)run.step,
            (long long)tg_model_param_count(&run.model), tg_tokenizer_kind_name(run.tok.kind), (int)run.tok.vocab_size);

    TgEngine engine; /* the pool and the step arena the forward passes run on */
    tg_engine_open(&engine, 2, 16u << 20);
    TgSampleOptions options = {.temperature = 0.8, .top_k = 40};
    TgRng rng;
    tg_rng_seed(&rng, 1);
    char *text = NULL;
    size_t len = 0;
    TgSampler sampler = {.model = &run.model, .tape = &engine.tape, .opts = &options, .rng = &rng};
    TgStatus status = tg_sample_text(&sampler, &run.tok, prompt, strlen(prompt), tokens, &text, &len);
    if (status == TG_OK) {
        fputs(prompt, stdout);
        fwrite(text, 1, len, stdout);
        putchar('\n');
    } else {
        fprintf(stderr, "generate: %s\n", tg_error_message());
    }
    free(text);
    tg_engine_close(&engine);
    tg_pretrained_close(&run);
    return status == TG_OK ? 0 : 1;
}
