/* A batch of pairs' DPO loss, and the reference's log-probabilities (dpo.h). */
#include "train/dpo.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "data/pair_loader.h"
#include "tapegrad/ops.h"
#include "support/atomic_file.h"
#include "support/file_read.h"
#include "support/path.h"

TgTensor *tg_dpo_batch_loss(TgModel *model, TgTape *tape, const TgBatch *batch, const float *ref, double beta,
                            TgDpoStats *stats) {
    TG_CHECK(batch->batch % 2 == 0 && batch->key_start == NULL, "dpo: a batch is 2P unpacked rows, not %lld",
             (long long)batch->batch);
    TgTensor *logits = tg_model_forward(model, tape, batch, NULL);
    TgTensor *logps = tg_sequence_logprob(tape, logits, batch->targets, TG_IGNORE_INDEX);
    TgTensor *loss = tg_dpo_loss(tape, logps, ref, beta);
    if (stats) {
        int64_t P = batch->batch / 2;
        *stats = (TgDpoStats){0};
        for (int64_t p = 0; p < P; p++) {
            double c = logps->data[p], r = logps->data[P + p];
            double m = beta * ((c - ref[p]) - (r - ref[P + p]));
            stats->margin += m / (double)P;
            stats->accuracy += (m > 0 ? 1.0 : m == 0 ? 0.5 : 0.0) / (double)P; /* a tie is a coin's toss */
            stats->chosen += c / (double)P;
            stats->rejected += r / (double)P;
        }
    }
    return loss;
}

TgStatus tg_dpo_reference(TgModel *model, TgTape *tape, const TgSplit *split, int64_t pairs, int64_t seq,
                          int32_t pad_id, float *ref) {
    TgPairLoader ld;
    TG_TRY(tg_pair_loader_init(&ld, split, pairs, seq, 0, pad_id, false));
    size_t cells = (size_t)(2 * pairs * seq);
    int32_t *in = tg_malloc(cells * sizeof *in), *tg = tg_malloc(cells * sizeof *tg);
    uint64_t *which = tg_malloc((size_t)pairs * sizeof *which);
    bool grad = tg_tape_set_grad_enabled(tape, false);
    TgStatus s = TG_OK;
    /* the split's order once: the last batch wraps to the first pairs again, which are skipped */
    for (size_t done = 0; done < ld.n_pairs && s == TG_OK;) {
        s = tg_pair_loader_next(&ld, in, tg, which);
        if (s != TG_OK) break;
        TgBatch b = {.tokens = in, .targets = tg, .batch = 2 * pairs, .seq = seq};
        TgTensor *logits = tg_model_forward(model, tape, &b, NULL);
        TgTensor *logps = tg_sequence_logprob(tape, logits, tg, TG_IGNORE_INDEX);
        for (int64_t p = 0; p < pairs && done < ld.n_pairs; p++, done++) {
            ref[2 * which[p]] = logps->data[p];
            ref[2 * which[p] + 1] = logps->data[pairs + p];
        }
        tg_tape_reset(tape);
    }
    tg_tape_set_grad_enabled(tape, grad);
    tg_pair_loader_free(&ld);
    free(in), free(tg), free(which);
    return s;
}

TgStatus tg_dpo_reference_compute(TgModel *model, TgTape *tape, const TgSplit *train, const TgSplit *val, int64_t pairs,
                                  int64_t seq, int32_t pad_id, TgDpoReference *ref) {
    memset(ref, 0, sizeof *ref);
    TG_TRY(tg_pair_split_count(train, &ref->train_pairs));
    TG_TRY(tg_pair_split_count(val, &ref->val_pairs));
    ref->train = tg_malloc((2 * ref->train_pairs + 1) * sizeof(float));
    ref->val = tg_malloc((2 * ref->val_pairs + 1) * sizeof(float));
    TG_TRY(tg_dpo_reference(model, tape, train, pairs, seq, pad_id, ref->train));
    return tg_dpo_reference(model, tape, val, pairs, seq, pad_id, ref->val);
}

/* The file: a header of 8 little-endian u64 (magic, version, train pairs, val pairs, the train and
 * val token hashes, their token counts), then the train pairs' floats, then the val pairs'. */
#define REF_MAGIC 0x4645524f50445447ull /* "TGDPOREF" */
#define REF_VERSION 1
enum { REF_HEADER = 8 };

static void reference_header(const TgSplit *train, const TgSplit *val, const TgDpoReference *ref, uint64_t *h) {
    uint64_t header[REF_HEADER] = {REF_MAGIC,          REF_VERSION,      ref->train_pairs, ref->val_pairs,
                                   train->tokens.hash, val->tokens.hash, train->tokens.n,  val->tokens.n};
    memcpy(h, header, sizeof header);
}

TgStatus tg_dpo_reference_save(const char *dir, const TgSplit *train, const TgSplit *val, const TgDpoReference *ref) {
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_DPO_REFERENCE_FILE));
    size_t floats = 2 * (ref->train_pairs + ref->val_pairs);
    size_t bytes = REF_HEADER * sizeof(uint64_t) + floats * sizeof(float);
    uint8_t *buf = tg_malloc(bytes);
    reference_header(train, val, ref, (uint64_t *)buf);
    float *f = (float *)(buf + REF_HEADER * sizeof(uint64_t));
    memcpy(f, ref->train, 2 * ref->train_pairs * sizeof(float));
    memcpy(f + 2 * ref->train_pairs, ref->val, 2 * ref->val_pairs * sizeof(float));
    TgStatus s = tg_atomic_write(path, buf, bytes);
    free(buf);
    return s;
}

TgStatus tg_dpo_reference_load(const char *dir, const TgSplit *train, const TgSplit *val, TgDpoReference *ref) {
    memset(ref, 0, sizeof *ref);
    TG_TRY(tg_pair_split_count(train, &ref->train_pairs));
    TG_TRY(tg_pair_split_count(val, &ref->val_pairs));
    char path[TG_PATH_CAP];
    TG_TRY(tg_path_join(path, sizeof path, dir, TG_DPO_REFERENCE_FILE));
    size_t floats = 2 * (ref->train_pairs + ref->val_pairs);
    size_t want = REF_HEADER * sizeof(uint64_t) + floats * sizeof(float), size = 0;
    char *contents = NULL;
    TgStatus s = tg_file_read_all(path, want + 1, &contents, &size);
    if (s != TG_OK)
        return tg_fail_context(s,
                               "%s, the reference log-probabilities of this dpo run (computed at its start from "
                               "the weights it began with): without them it cannot resume; start it anew from its "
                               "`init_from`",
                               path);
    uint64_t expected[REF_HEADER], found[REF_HEADER] = {0};
    reference_header(train, val, ref, expected);
    if (size >= sizeof found) memcpy(found, contents, sizeof found);
    if (size != want || memcmp(found, expected, sizeof expected) != 0) {
        free(contents);
        return tg_fail(TG_ERR_FORMAT,
                       "%s is not the reference of this run's pairs (%zu bytes, %" PRIu64 " + %" PRIu64
                       " pairs; expected %zu bytes for %zu + %zu): it was damaged or replaced. Start the dpo run anew "
                       "from its `init_from`",
                       path, size, found[2], found[3], want, ref->train_pairs, ref->val_pairs);
    }
    ref->train = tg_malloc((2 * ref->train_pairs + 1) * sizeof(float));
    ref->val = tg_malloc((2 * ref->val_pairs + 1) * sizeof(float));
    const float *f = (const float *)(contents + REF_HEADER * sizeof(uint64_t));
    memcpy(ref->train, f, 2 * ref->train_pairs * sizeof(float));
    memcpy(ref->val, f + 2 * ref->train_pairs, 2 * ref->val_pairs * sizeof(float));
    free(contents);
    return TG_OK;
}

void tg_dpo_reference_free(TgDpoReference *ref) {
    free(ref->train), free(ref->val);
    memset(ref, 0, sizeof *ref);
}
