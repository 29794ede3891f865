/* Sampling from a trained model, one token at a time with a KV cache. */
#ifndef TG_SAMPLE_H
#define TG_SAMPLE_H

#include <stdint.h>

#include "tapegrad/tokenizer.h"
#include "tapegrad/error.h"
#include "tapegrad/rng.h"
#include "tapegrad/tape.h"
#include "tapegrad/model.h"

#pragma GCC visibility push(default)

/* Called by tg_sample_generate before each draw with the text so far (text[0..len-1]) and the logits
 * (vocab floats) the next token is drawn from; those logits are valid only during the call. */
typedef void (*TgSampleObserver)(void *ctx, const int32_t *text, int64_t len, const float *logits, int64_t vocab);

typedef struct TgSampleOptions {
    double temperature;      /* 0 picks the most likely token (greedy, deterministic) */
    int top_k;               /* 0 means the whole vocabulary */
    TgSampleObserver observer; /* optional (NULL): sees every step's logits (tests, inspection) */
    void *observer_ctx;
    double top_p;            /* nucleus: the fewest most likely tokens holding this much probability; 0 or 1: all */
    double repetition_penalty; /* > 0: tg_sample_penalize over the text so far (1 changes nothing); 0: none */
    double frequency_penalty;  /* OpenAI's, over the tokens drawn so far (tg_sample_penalize_drawn); 0: none */
    double presence_penalty;   /* likewise; 0: none */
} TgSampleOptions;

/* What `tapegrad sample` and the sample after training use unless told otherwise: temperature
 * 0.8, top-k 40, no top-p, no repetition penalty, no observer. */
TgSampleOptions tg_sample_defaults(void);

/* Picks a token from one row of logits (vocab floats): the argmax (lowest id on ties) at temperature
 * 0, otherwise a draw from softmax(logits / temperature) restricted to the top_k largest logits
 * (ties ranked by lower id), then to the nucleus of top_p (those logits in rank order up to and
 * including the first at which their probabilities, renormalised, reach top_p), and renormalised,
 * using one tg_rng_uniform. The order is Hugging Face's: temperature, top-k, top-p. scratch_probs
 * and scratch_ids hold vocab floats and ints. Reentrant: threads may sample at once, each with its
 * own rng and scratch. A row holding a NaN or an infinity (activations that overflowed float32)
 * has no token to draw: -1, with the message (tg_error_message) naming the first such id. */
int32_t tg_sample_token(const float *logits, int64_t vocab, const TgSampleOptions *opts, TgRng *rng,
                     float *scratch_probs, int32_t *scratch_ids);

/* The repetition penalty of CTRL (Keskar et al. 2019), as Hugging Face and llama.cpp apply it:
 * each distinct id of history[0..n) gets its logit divided by `penalty` when positive, multiplied
 * when negative, once however often it occurs; penalty 1 leaves every logit as it is, bit for
 * bit. `seen` holds vocab zeros and is left zeroed. */
void tg_sample_penalize(float *logits, int64_t vocab, const int32_t *history, int64_t n, double penalty, uint8_t *seen);

/* OpenAI's frequency and presence penalties (its API's `frequency_penalty`, `presence_penalty`):
 * the logit of each id drawn so far, drawn[0..n), loses frequency x (how often it was drawn) +
 * presence, once per distinct id; 0 and 0 leave every logit as it is, bit for bit. A reply's own
 * tokens count, not its prompt's. Applied after the repetition penalty, as llama.cpp orders them.
 * `counts` holds vocab zeros and is left zeroed. */
void tg_sample_penalize_drawn(float *logits, int64_t vocab, const int32_t *drawn, int64_t n, double frequency, double presence,
                              int32_t *counts);

/* What draws the tokens: the model, the tape its forwards run on (with gradients off while it
 * samples), the options, and the generator, which every draw advances. */
typedef struct TgSampler {
    TgModel *model;
    TgTape *tape;
    const TgSampleOptions *opts;
    TgRng *rng;
} TgSampler;

/* Feeds the prompt, then generates up to n_new tokens (stopping early at stop_id if >= 0).
 * out (prompt_len + n_new ints) receives prompt + generated tokens; returns how many in total,
 * or -1 when a step's logits are not finite (tg_sample_token's -1; the message names the step).
 * The prompt must be non-empty and at most the context length; past the context the cache
 * restarts from the last half of the text. A repetition penalty applies to the tokens the cache
 * holds (the prompt's included), after the observer saw the logits; the frequency and presence
 * penalties to the tokens it drew (tg_sample_penalize_drawn). */
int64_t tg_sample_generate(const TgSampler *sampler, const int32_t *prompt, int64_t prompt_len, int64_t n_new,
                           int32_t stop_id, int32_t *out);

/* Text in, text out: encodes prompt[0..prompt_len) with `tok` as a document starts (after the
 * BOS of a tokenizer that frames documents with one; an empty prompt becomes the token a document
 * starts after, tg_tokenizer_doc_start; of a prompt longer than the context, its last seq_len
 * tokens are kept), generates up to n_new
 * tokens with tg_sample_generate, stopping at <eot>, and decodes them. *text (malloc'ed,
 * NUL-terminated; the caller frees it) receives the continuation alone, *text_len its bytes.
 * Fails (TG_ERR_ARG) on a prompt byte a char tokenizer does not know, and (TG_ERR_NUMERIC) when
 * a step's logits are not finite, as tg_sample_generate does. */
TgStatus tg_sample_text(const TgSampler *sampler, const TgTokenizer *tok, const char *prompt, size_t prompt_len,
                        int64_t n_new, char **text, size_t *text_len);

#pragma GCC visibility pop

#endif
