/* Checkpoint files: reading the gzip stream described in checkpoint.h. It goes through zlib's
 * inflate directly (not gzFile) so that every way a file can be wrong (cut short, damaged,
 * padded, another gzip) is told apart in the message. */
#include "checkpoint/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "lib/checked.h"
#include "checkpoint/checkpoint_format.h"
#include "checkpoint/checkpoint_internal.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint files are little-endian; this host is not"
#endif

/* deflate never compresses by more than 1032:1, so a header or record claiming more raw bytes
 * than that per file byte is corrupt, and is refused before anything is allocated for it */
enum { MAX_DEFLATE_RATIO = 1032 };

/* Inverse of the writer's shuffle: byte b of out[i] = in[b*n + i]. */
static void unshuffle_planes(const uint8_t *in, size_t n, float *out) {
    const uint8_t *p0 = in, *p1 = in + n, *p2 = in + 2 * n, *p3 = in + 3 * n;
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)p0[i] | (uint32_t)p1[i] << 8 | (uint32_t)p2[i] << 16 | (uint32_t)p3[i] << 24;
        memcpy(out + i, &x, 4);
    }
}

/* ---------------------------------------------------------------- reading */

/* The reader keeps the first error in status: from then on every read returns false and does
 * nothing, so a chain of reads joined by && stops at the first that fails, and status says why. */
typedef struct {
    int fd;
    const char *path;
    int64_t file_bytes;
    int64_t max_raw_bytes;   /* the most a stream of file_bytes can inflate to */
    z_stream zs;
    bool zs_ready, stream_end, file_eof;
    unsigned char *in;
    uint8_t *scratch;
    size_t scratch_cap;
    uint32_t version, flags;
    TgStatus status;
} Reader;

static bool stream_fail(Reader *r, TgStatus s) {
    r->status = s;
    return false;
}

/* One inflate call into zs.next_out, reading more of the file first when needed. */
static bool pump(Reader *r, const char *what) {
    if (r->zs.avail_in == 0 && !r->file_eof) {
        ssize_t k;
        do k = read(r->fd, r->in, TG_CHECKPOINT_IO_CHUNK);
        while (k < 0 && errno == EINTR);
        if (k < 0)
            return stream_fail(r, tg_fail(TG_ERR_IO, "%s: read error inside %s: %s", r->path, what, strerror(errno)));
        if (k == 0) r->file_eof = true;
        r->zs.next_in = r->in;
        r->zs.avail_in = (uInt)k;
    }
    int rc = inflate(&r->zs, Z_NO_FLUSH);
    if (rc == Z_STREAM_END) r->stream_end = true;
    else if (rc == Z_BUF_ERROR && r->file_eof && r->zs.avail_in == 0)
        return stream_fail(r, tg_fail(TG_ERR_FORMAT,
                                      "%s: truncated checkpoint: the file ends after %lld bytes, inside %s (an interrupted "
                                      "copy or write?)",
                                      r->path, (long long)r->file_bytes, what));
    else if ((rc == Z_DATA_ERROR || rc == Z_NEED_DICT) && r->zs.msg && strstr(r->zs.msg, "incorrect"))
        return stream_fail(r, tg_fail(TG_ERR_FORMAT,
                                      "%s: corrupt checkpoint: the gzip %s check failed, so its bytes changed after it was "
                                      "written",
                                      r->path, strstr(r->zs.msg, "length") ? "length" : "CRC32"));
    else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT)
        return stream_fail(r, tg_fail(TG_ERR_FORMAT, "%s: corrupt checkpoint: the gzip data is damaged inside %s (%s)",
                                      r->path, what, r->zs.msg ? r->zs.msg : "invalid data"));
    else if (rc == Z_MEM_ERROR)
        return stream_fail(r, tg_fail(TG_ERR_NOMEM, "%s: out of memory while decompressing", r->path));
    return true;
}

static bool get(Reader *r, void *p, size_t n, const char *what) {
    if (r->status != TG_OK) return false;
    unsigned char *b = p;
    while (n > 0) {
        size_t chunk = n > UINT_MAX ? UINT_MAX : n;
        r->zs.next_out = b;
        r->zs.avail_out = (uInt)chunk;
        while (r->zs.avail_out > 0) {
            if (r->stream_end)
                return stream_fail(r, tg_fail(TG_ERR_FORMAT,
                                              "%s: the gzip stream ends inside %s: the file is corrupt or not a whole "
                                              "tapegrad checkpoint",
                                              r->path, what));
            if (!pump(r, what)) return false;
        }
        b += chunk, n -= chunk;
    }
    return true;
}

/* A content check failed (unknown tensor, odd shape, ...). Damage to the compressed body makes
 * such nonsense too, so decompress the rest: if the gzip layer then fails, that is the message. */
static void content_fail(Reader *r, TgStatus s) {
    char original[1024];
    snprintf(original, sizeof original, "%s", tg_error_message());
    unsigned char *sink = tg_malloc(TG_CHECKPOINT_IO_CHUNK);
    while (!r->stream_end && r->status == TG_OK) {
        r->zs.next_out = sink;
        r->zs.avail_out = TG_CHECKPOINT_IO_CHUNK;
        pump(r, "the rest of the file");
    }
    free(sink);
    if (r->status == TG_OK) r->status = tg_fail(s, "%s", original);
}

/* After the end marker: the stream must end (which checks CRC32 and length) with nothing after it. */
static bool expect_end(Reader *r) {
    unsigned char extra;
    while (r->status == TG_OK && !r->stream_end) {
        r->zs.next_out = &extra;
        r->zs.avail_out = 1;
        if (!pump(r, "the gzip trailer")) return false;
        if (r->zs.avail_out == 0) {
            content_fail(r, tg_fail(TG_ERR_FORMAT, "%s: unexpected data after the end marker", r->path));
            return false;
        }
    }
    if (r->status != TG_OK) return false;
    bool trailing = r->zs.avail_in > 0;
    if (!trailing && !r->file_eof) {
        ssize_t k;
        do k = read(r->fd, r->in, 1);
        while (k < 0 && errno == EINTR);
        trailing = k > 0;
    }
    if (trailing)
        return stream_fail(r, tg_fail(TG_ERR_FORMAT, "%s: extra bytes after the end of the gzip stream", r->path));
    return true;
}

static TgStatus reader_open(Reader *r, const char *path) {
    memset(r, 0, sizeof *r);
    r->fd = -1;
    r->path = path;
    struct stat st;
    if (stat(path, &st) != 0) return r->status = tg_fail(TG_ERR_IO, "%s: cannot open checkpoint: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        /* the file's problem (a pointer naming a folder, say), exit 1 as every file problem */
        return r->status = tg_fail(TG_ERR_IO, "%s is a folder, not a checkpoint file; pass a checkpoint file, or its run folder",
                                   path);
    if (st.st_size == 0) return r->status = tg_fail(TG_ERR_FORMAT, "%s: empty file, not a checkpoint", path);
    r->file_bytes = (int64_t)st.st_size;
    if (!tg_mul_i64(r->file_bytes, MAX_DEFLATE_RATIO, &r->max_raw_bytes)) r->max_raw_bytes = INT64_MAX;
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) return r->status = tg_fail(TG_ERR_IO, "%s: cannot open checkpoint: %s", path, strerror(errno));
    unsigned char head[2] = {0, 0};
    ssize_t got = pread(r->fd, head, 2, 0);
    if (got < 2 || head[0] != 0x1f || head[1] != 0x8b)
        return r->status = tg_fail(TG_ERR_FORMAT, "%s: not a gzip file, so not a tapegrad checkpoint", path);
    if (inflateInit2(&r->zs, TG_CHECKPOINT_GZIP_WINDOW_BITS) != Z_OK)
        return r->status = tg_fail(TG_ERR_NOMEM, "%s: cannot start gzip decompression", path);
    r->zs_ready = true;
    r->in = tg_malloc(TG_CHECKPOINT_IO_CHUNK);
    char magic[8];
    if (!get(r, magic, 8, "the header")) return r->status;
    if (memcmp(magic, CHECKPOINT_MAGIC, 8) != 0)
        return r->status = tg_fail(TG_ERR_FORMAT, "%s: a gzip file without the tapegrad checkpoint magic: not a checkpoint", path);
    if (!get(r, &r->version, 4, "the header")) return r->status;
    if (r->version == 0 || r->version > TG_CHECKPOINT_VERSION) {
        content_fail(r, tg_fail(TG_ERR_FORMAT, "%s: checkpoint format version %u; this tapegrad reads versions 1 to %d%s", path,
                                r->version, TG_CHECKPOINT_VERSION,
                                r->version > TG_CHECKPOINT_VERSION ? " (a newer tapegrad wrote it: upgrade to read it)" : ""));
        return r->status;
    }
    if (r->version >= 2 && !get(r, &r->flags, 4, "the header")) return r->status;
    if ((r->flags &
         ~(uint32_t)(TG_CHECKPOINT_FLAG_SHUFFLED | TG_CHECKPOINT_FLAG_PARAM_SET | TG_CHECKPOINT_FLAG_ADAPTER |
                     TG_CHECKPOINT_FLAG_BEST | TG_CHECKPOINT_FLAG_BEST_SOURCE | TG_CHECKPOINT_FLAG_QK_NORM)) ||
        ((r->flags & TG_CHECKPOINT_FLAG_PARAM_SET) &&
         (r->flags & (TG_CHECKPOINT_FLAG_ADAPTER | TG_CHECKPOINT_FLAG_QK_NORM))) ||
        ((r->flags & TG_CHECKPOINT_FLAG_BEST_SOURCE) && !(r->flags & TG_CHECKPOINT_FLAG_BEST))) {
        content_fail(r, tg_fail(TG_ERR_FORMAT, "%s: unknown checkpoint flags 0x%x (a newer tapegrad wrote it?)", path,
                                r->flags));
        return r->status;
    }
    return TG_OK;
}

static void reader_close(Reader *r) {
    if (r->zs_ready) inflateEnd(&r->zs);
    if (r->fd >= 0) close(r->fd);
    free(r->in);
    free(r->scratch);
}

static bool get_config(Reader *r, TgModelConfig *c) {
    int64_t ints[7];
    uint32_t ffn;
    if (!get(r, ints, sizeof ints, "the model config") || !get(r, &ffn, 4, "the model config") ||
        !get(r, &c->rope_theta, 8, "the model config") || !get(r, &c->norm_eps, 8, "the model config"))
        return false;
    c->dim = ints[0], c->n_layers = ints[1], c->n_heads = ints[2], c->n_kv_heads = ints[3];
    c->hidden = ints[4], c->vocab = ints[5], c->seq_len = ints[6];
    c->ffn = (TgFfnKind)ffn;
    c->qk_norm = (r->flags & TG_CHECKPOINT_FLAG_QK_NORM) != 0;
    if (!tg_ffn_kind_valid(ffn) || tg_model_config_validate(c) != TG_OK) {
        content_fail(r, !tg_ffn_kind_valid(ffn) ? tg_fail(TG_ERR_FORMAT, "%s: unknown FFN kind %u in the checkpoint's config", r->path, ffn)
                                       : tg_fail_context(TG_ERR_FORMAT, "%s: invalid model config in the checkpoint", r->path));
        return false;
    }
    /* the file stores every parameter three times (weight, AdamW m and v) as float32 */
    int64_t params = tg_model_config_param_count(c), raw;
    if (!tg_mul_i64(params, 3 * (int64_t)sizeof(float), &raw) || raw > r->max_raw_bytes) {
        content_fail(r, tg_fail(TG_ERR_FORMAT,
                                "%s: the header declares a model of %lld parameters, more than a file of %lld bytes "
                                "can hold; the file is corrupt",
                                r->path, (long long)params, (long long)r->file_bytes));
        return false;
    }
    return true;
}

/* A best record a run can have written at `step`: an evaluation of it at a step before, its value
 * then finite, and no more evaluations since than steps. */
static bool best_record_valid(const TgBestRecord *b, int64_t step) {
    if (!b->kept) return true;
    if (b->step < -1 || b->step > step || b->evals_since < 0 || b->evals_since > step) return false;
    return b->step < 0 ? isnan(b->value) : isfinite(b->value);
}

TgStatus tg_trainer_state_check(const TgTrainerState *s, const char *path) {
    const char *bad = s->step < 0 || s->step > TG_CHECKPOINT_MAX_STEP                   ? "step"
                      : s->tokens_seen < 0 || s->tokens_seen > TG_CHECKPOINT_MAX_TOKENS ? "tokens seen"
                      : isnan(s->best_val_loss) || s->best_val_loss < 0                 ? "best val loss"
                      : !isfinite(s->elapsed_s) || s->elapsed_s < 0                     ? "elapsed time"
                      : s->loader.rng.has_spare > 1                                     ? "data loader state"
                      : !best_record_valid(&s->best, s->step)                           ? "best record"
                                                                                        : NULL;
    if (!bad) return TG_OK;
    return tg_fail(TG_ERR_FORMAT,
                   "%s: the trainer state has an invalid %s (step %lld, tokens seen %lld, best val loss %g, elapsed %g s); "
                   "the file is corrupt",
                   path, bad, (long long)s->step, (long long)s->tokens_seen, s->best_val_loss, s->elapsed_s);
}

static bool get_state(Reader *r, TgTrainerState *s) {
    memset(s, 0, sizeof *s);
    const char *w = "the trainer state";
    uint8_t loader[TG_LOADER_STATE_BYTES];
    bool ok = get(r, &s->step, 8, w) && get(r, &s->tokens_seen, 8, w) && get(r, loader, sizeof loader, w) &&
              get(r, &s->best_val_loss, 8, w) && get(r, &s->elapsed_s, 8, w) && get(r, &s->seed, 8, w);
    s->best.kept = ok && (r->flags & TG_CHECKPOINT_FLAG_BEST);
    if (s->best.kept)
        ok = get(r, &s->best.value, 8, w) && get(r, &s->best.step, 8, w) && get(r, &s->best.evals_since, 8, w);
    if (ok && s->best.kept && (r->flags & TG_CHECKPOINT_FLAG_BEST_SOURCE)) ok = get(r, &s->best.source, 8, w);
    if (!ok) return false;
    tg_loader_state_unpack(loader, &s->loader);
    if (tg_trainer_state_check(s, r->path) != TG_OK) {
        content_fail(r, TG_ERR_FORMAT);
        return false;
    }
    return true;
}

/* Reads n floats into out, undoing the byte shuffle if the file has it. */
static bool get_floats(Reader *r, float *out, size_t n, const char *what) {
    if (n == 0) return r->status == TG_OK; /* an empty record: `out` may be NULL, and NULL + 0 is undefined */
    if (!(r->flags & TG_CHECKPOINT_FLAG_SHUFFLED)) return get(r, out, n * sizeof(float), what);
    if (r->scratch_cap < n * sizeof(float)) {
        free(r->scratch);
        r->scratch_cap = n * sizeof(float);
        r->scratch = tg_malloc(r->scratch_cap);
    }
    if (!get(r, r->scratch, n * sizeof(float), what)) return false;
    unshuffle_planes(r->scratch, n, out);
    return true;
}

static bool get_tag(Reader *r, TgCheckpointInfo *ci) {
    uint16_t len;
    if (!get(r, &len, 2, "the tag")) return false;
    unsigned cap = (r->flags & TG_CHECKPOINT_FLAG_PARAM_SET) ? TG_CHECKPOINT_PARAM_TAG_CAP : TG_CHECKPOINT_TAG_CAP;
    if (len == 0 || len >= cap) {
        content_fail(r, tg_fail(TG_ERR_FORMAT, "%s: a %u-byte tag; the file is corrupt", r->path, len));
        return false;
    }
    if (!get(r, ci->tag, len, "the tag")) return false;
    ci->tag[len] = '\0';
    if (strlen(ci->tag) != len) {
        content_fail(r, tg_fail(TG_ERR_FORMAT, "%s: the parameter set's tag holds a NUL byte; the file is corrupt", r->path));
        return false;
    }
    return true;
}

/* The header after the flags: a model's config and tokenizer fingerprint (an adapter's: its
 * base's, then its tag), or a parameter set's tag. */
static bool get_header(Reader *r, TgCheckpointInfo *ci) {
    if (!(r->flags & TG_CHECKPOINT_FLAG_PARAM_SET) &&
        !(get_config(r, &ci->cfg) && get(r, &ci->tokenizer_fingerprint, 8, "the header")))
        return false;
    return (r->flags & (TG_CHECKPOINT_FLAG_PARAM_SET | TG_CHECKPOINT_FLAG_ADAPTER)) ? get_tag(r, ci) : true;
}

static bool same_config(const TgModelConfig *a, const TgModelConfig *b) {
    return a->dim == b->dim && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->hidden == b->hidden && a->vocab == b->vocab &&
           a->seq_len == b->seq_len && a->ffn == b->ffn && a->rope_theta == b->rope_theta &&
           a->norm_eps == b->norm_eps && a->qk_norm == b->qk_norm;
}

static void config_str(const TgModelConfig *c, char *buf, size_t cap) {
    snprintf(buf, cap, "dim %lld, layers %lld, heads %lld/%lld%s, %s hidden %lld, vocab %lld, seq %lld, theta %g",
             (long long)c->dim, (long long)c->n_layers, (long long)c->n_heads, (long long)c->n_kv_heads,
             c->qk_norm ? " with QK-norm" : "", tg_ffn_kind_name(c->ffn), (long long)c->hidden, (long long)c->vocab,
             (long long)c->seq_len, c->rope_theta);
}

static const char *shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++) n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

/* The header is what the caller asked for: a model's of config `cfg` (with a tag: an adapter's
 * tagged `tag`, on a base of that config), or (cfg NULL) a parameter set's tagged `tag` (NULL: any). */
static bool header_matches(Reader *r, const TgCheckpointInfo *ci, const TgModelConfig *cfg, const char *tag) {
    const char *path = r->path;
    bool param_set = (r->flags & TG_CHECKPOINT_FLAG_PARAM_SET) != 0, adapter = (r->flags & TG_CHECKPOINT_FLAG_ADAPTER) != 0;
    if (cfg && param_set)
        content_fail(r, tg_fail(TG_ERR_MISMATCH, "%s: a parameter set's checkpoint (tag '%s'), not a model's", path, ci->tag));
    else if (cfg && adapter && !tag)
        content_fail(r, tg_fail(TG_ERR_MISMATCH,
                                "%s: a LoRA adapter's checkpoint (%s), not a whole model's: open its run folder (its base "
                                "is loaded with it) or merge it (tapegrad ckpt merge)",
                                path, ci->tag));
    else if (cfg && tag && !adapter)
        content_fail(r, tg_fail(TG_ERR_MISMATCH, "%s: a whole model's checkpoint, not a LoRA adapter's", path));
    else if (!cfg && !param_set)
        content_fail(r, tg_fail(TG_ERR_MISMATCH, "%s: a model's checkpoint, not a parameter set's", path));
    else if (cfg && !same_config(&ci->cfg, cfg)) {
        char a[256], b[256];
        config_str(&ci->cfg, a, sizeof a);
        config_str(cfg, b, sizeof b);
        content_fail(r, tg_fail(TG_ERR_MISMATCH, "%s: the checkpoint's model (%s) differs from the one asked for (%s)", path, a, b));
    } else if (tag && strcmp(tag, ci->tag) != 0)
        content_fail(r, tg_fail(TG_ERR_MISMATCH, "%s: %s tagged '%s', not '%s'", path, adapter ? "an adapter" : "a parameter set",
                                ci->tag, tag));
    return r->status == TG_OK;
}

TgStatus tg_checkpoint_read_config(const char *path, TgModelConfig *cfg, uint64_t *tokenizer_fingerprint) {
    Reader r;
    TgCheckpointInfo ci;
    memset(&ci, 0, sizeof ci);
    /* any config matches itself: only a parameter set's header is refused (an adapter's gives its base's) */
    if (reader_open(&r, path) == TG_OK && get_header(&r, &ci) &&
        ((r.flags & TG_CHECKPOINT_FLAG_ADAPTER) || header_matches(&r, &ci, &ci.cfg, NULL))) {
        *cfg = ci.cfg;
        *tokenizer_fingerprint = ci.tokenizer_fingerprint;
    }
    reader_close(&r);
    return r.status;
}

TgStatus tg_checkpoint_read_header(const char *path, TgCheckpointInfo *info) {
    Reader r;
    memset(info, 0, sizeof *info);
    if (reader_open(&r, path) == TG_OK && get_header(&r, info)) info->version = r.version, info->flags = r.flags;
    reader_close(&r);
    return r.status;
}

/* One tensor record's header. */
typedef struct {
    char name[TG_NAME_CAP];
    uint8_t kind;
    uint32_t ndim;
    int64_t shape[TG_MAX_DIMS];
    int64_t numel;
} RecordHeader;

/* "", " (AdamW m)", " (AdamW v)": after a tensor's name in a message */
static const char *kind_note(int kind) {
    return kind == TG_CHECKPOINT_KIND_ADAM_M ? " (AdamW m)" : kind == TG_CHECKPOINT_KIND_ADAM_V ? " (AdamW v)" : "";
}

/* Every value of a record is one a run writes: weights and AdamW m finite, AdamW v finite and
 * not negative (a mean of squares). A NaN or Inf from a damaged or hand-made file would otherwise
 * load, then come out as a loss of nan, an empty sample, or a resume whose first update fails and
 * blames the learning rate. The first bad value is named, with its tensor and index. */
static bool check_values(Reader *r, const RecordHeader *h, const float *v) {
    for (int64_t i = 0; i < h->numel; i++) {
        bool bad = !isfinite(v[i]) || (h->kind == TG_CHECKPOINT_KIND_ADAM_V && v[i] < 0);
        if (!bad) continue;
        const char *what = isnan(v[i]) ? "NaN" : isinf(v[i]) ? (v[i] > 0 ? "+Inf" : "-Inf") : "a negative value";
        char value[32] = "";
        if (isfinite(v[i])) snprintf(value, sizeof value, " (%g)", (double)v[i]);
        content_fail(r, tg_fail(TG_ERR_FORMAT,
                                "%s: tensor '%s'%s holds %s%s at index %lld of %lld; %s, so the file is damaged or "
                                "was not written by a run",
                                r->path, h->name, kind_note(h->kind), what, value, (long long)i, (long long)h->numel,
                                h->kind == TG_CHECKPOINT_KIND_ADAM_V ? "a checkpoint's AdamW v is finite and not negative"
                                                                  : "a checkpoint holds only finite numbers"));
        return false;
    }
    return true;
}

static bool get_record_header(Reader *r, uint32_t index, RecordHeader *h) {
    uint16_t len;
    if (!get(r, &len, 2, "a tensor header")) return false;
    if (len == 0 || len >= TG_NAME_CAP) {
        content_fail(r, tg_fail(TG_ERR_FORMAT, "%s: tensor record %u has a %u-byte name; the file is corrupt", r->path, index, len));
        return false;
    }
    if (!get(r, h->name, len, "a tensor name") || !get(r, &h->kind, 1, "a tensor header") ||
        !get(r, &h->ndim, 4, "a tensor header"))
        return false;
    h->name[len] = '\0';
    if (h->kind > TG_CHECKPOINT_KIND_ADAM_V || h->ndim > TG_MAX_DIMS) {
        content_fail(r, tg_fail(TG_ERR_FORMAT, "%s: tensor '%s' has kind %u and %u dims; the file is corrupt", r->path,
                                h->name, h->kind, h->ndim));
        return false;
    }
    if (!get(r, h->shape, 8 * (size_t)h->ndim, "a tensor shape")) return false;
    h->numel = 1;
    for (uint32_t d = 0; d < h->ndim; d++) {
        int64_t bytes;
        if (h->shape[d] < 0 || !tg_mul_i64(h->numel, h->shape[d], &h->numel) ||
            !tg_mul_i64(h->numel, (int64_t)sizeof(float), &bytes) || bytes > r->max_raw_bytes) {
            char s[128];
            content_fail(r, tg_fail(TG_ERR_FORMAT, "%s: tensor '%s' claims shape %s, impossible in a file of %lld bytes; the "
                                                   "file is corrupt",
                                    r->path, h->name, shape_str((int)h->ndim, h->shape, s, sizeof s), (long long)r->file_bytes));
            return false;
        }
    }
    return true;
}

/* The end of every stream: the trainer state, the end marker, then nothing but gzip's trailer. */
static TgStatus read_trailer(Reader *r, TgTrainerState *state, const char *path) {
    char end[8];
    if (!get_state(r, state) || !get(r, end, 8, "the end marker")) return r->status;
    if (memcmp(end, CHECKPOINT_END_MARK, 8) != 0)
        content_fail(r, tg_fail(TG_ERR_FORMAT, "%s: the end marker is missing after the trainer state; the file is corrupt", path));
    else
        expect_end(r);
    return r->status;
}

/* What every read of a whole stream reports of it, with its count of records. */
static void info_of_stream(const Reader *r, uint32_t count, TgCheckpointInfo *ci) {
    ci->n_tensors = (int)count;
    ci->version = r->version, ci->flags = r->flags;
    ci->raw_bytes = (int64_t)r->zs.total_out;
    ci->file_bytes = r->file_bytes;
}

TgStatus tg_checkpoint_load(const char *path, TgModel *model, TgCheckpointInfo *info) {
    return tg_checkpoint_load_store(path, &model->params, &model->cfg, NULL, info);
}

/* The header, if it is what the caller asked for (header_matches), and the count of records. */
static TgStatus read_model_header(Reader *r, TgCheckpointInfo *ci, const TgModelConfig *cfg, const char *tag,
                                  uint32_t *count) {
    if (get_header(r, ci) && header_matches(r, ci, cfg, tag)) get(r, count, 4, "the tensor count");
    return r->status;
}

/* A store's three copies as a checkpoint fills them (weights, AdamW m and v: TG_CHECKPOINT_KIND_*),
 * staged, so the store itself is written only once every record has been read and checked. */
typedef struct {
    float *values[3]; /* ps->total floats each */
    bool *seen;       /* (3, ps->count): the records read */
} Staged;

/* One record into the staged copies: a tensor of the store, of its shape, not read before. */
static TgStatus stage_record(Reader *r, const TgParamStore *ps, uint32_t index, Staged *staged) {
    const char *path = r->path;
    RecordHeader h;
    if (!get_record_header(r, index, &h)) return r->status;
    int idx = tg_params_index(ps, h.name);
    if (idx < 0) {
        content_fail(r, tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' (%s) is not part of this model", path, h.name,
                                tg_checkpoint_kind_name(h.kind)));
        return r->status;
    }
    const TgTensor *t = ps->tensors[idx];
    bool same = (int)h.ndim == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = h.shape[d] == t->shape[d];
    if (!same) {
        char want[64], got[128];
        content_fail(r, tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' (%s) has shape %s, the model's is %s", path, h.name,
                                tg_checkpoint_kind_name(h.kind), shape_str((int)h.ndim, h.shape, got, sizeof got),
                                tg_tensor_shape_str(t, want, sizeof want)));
        return r->status;
    }
    if (staged->seen[h.kind * ps->count + idx]) {
        content_fail(r, tg_fail(TG_ERR_FORMAT, "%s: tensor '%s' (%s) appears twice", path, h.name,
                                tg_checkpoint_kind_name(h.kind)));
        return r->status;
    }
    staged->seen[h.kind * ps->count + idx] = true;
    float *values = staged->values[h.kind] + ps->offsets[idx];
    if (get_floats(r, values, (size_t)t->numel, h.name)) check_values(r, &h, values);
    return r->status;
}

/* Every tensor of the store read, with its two AdamW moments. */
static TgStatus check_all_staged(Reader *r, const TgParamStore *ps, const Staged *staged) {
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < ps->count; i++)
            if (!staged->seen[k * ps->count + i])
                return r->status =
                           tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s'%s is missing", r->path, ps->tensors[i]->name,
                                   k == 0   ? ""
                                   : k == 1 ? " (AdamW m)"
                                            : " (AdamW v)");
    return TG_OK;
}

TgStatus tg_checkpoint_load_store(const char *path, const TgParamStore *ps, const TgModelConfig *cfg, const char *tag,
                                TgCheckpointInfo *info) {
    Reader r;
    TgCheckpointInfo ci;
    memset(&ci, 0, sizeof ci);
    Staged staged = {0};
    uint32_t count = 0;
    TgStatus s = reader_open(&r, path);
    if (s == TG_OK) s = read_model_header(&r, &ci, cfg, tag, &count);
    if (s == TG_OK) {
        for (int k = 0; k < 3; k++) staged.values[k] = tg_malloc(ps->total * sizeof(float) + 4);
        staged.seen = tg_calloc((size_t)(3 * ps->count), sizeof *staged.seen);
    }
    for (uint32_t n = 0; s == TG_OK && n < count; n++) s = stage_record(&r, ps, n, &staged);
    if (s == TG_OK) s = read_trailer(&r, &ci.state, path);
    if (s == TG_OK) s = check_all_staged(&r, ps, &staged);
    if (s == TG_OK) { /* everything checked: only now touch the model */
        memcpy(ps->data, staged.values[0], ps->total * sizeof(float));
        memcpy(ps->m, staged.values[1], ps->total * sizeof(float));
        memcpy(ps->v, staged.values[2], ps->total * sizeof(float));
        info_of_stream(&r, count, &ci);
        if (info) *info = ci;
    }
    for (int k = 0; k < 3; k++) free(staged.values[k]);
    free(staged.seen);
    reader_close(&r);
    return s;
}

/* What inspecting gathers: a line per record, and the buffer a record's values pass through. */
typedef struct {
    TgCheckpointTensorInfo *list;
    size_t list_cap;
    float *values;
    size_t values_cap;
} Inspection;

/* Any header, and a count of records the file can hold: every record takes at least 8 bytes of
 * the stream, and no model has more than TG_MAX_TENSORS parameters, each written three times. */
static TgStatus read_any_header(Reader *r, TgCheckpointInfo *ci, uint32_t *count) {
    if (!get_header(r, ci) || !get(r, count, 4, "the tensor count")) return r->status;
    if ((int64_t)*count > r->max_raw_bytes / 8 || *count > 3 * (uint32_t)TG_MAX_TENSORS)
        content_fail(r, tg_fail(TG_ERR_FORMAT,
                                "%s: claims %u tensors, impossible in a file of %lld bytes; the file is corrupt",
                                r->path, *count, (long long)r->file_bytes));
    return r->status;
}

/* One record's header and values into the next line of the list, with the values' L2 norm. */
static TgStatus inspect_record(Reader *r, uint32_t index, Inspection *in) {
    RecordHeader h;
    if (!get_record_header(r, index, &h)) return r->status;
    if (index == in->list_cap) { /* grown as records arrive: a damaged count allocates nothing */
        in->list_cap = in->list_cap ? 2 * in->list_cap : 64;
        in->list = tg_realloc(in->list, in->list_cap * sizeof *in->list);
    }
    if ((size_t)h.numel > in->values_cap) {
        free(in->values);
        in->values_cap = (size_t)h.numel;
        in->values = tg_malloc(in->values_cap * sizeof(float));
    }
    if (!get_floats(r, in->values, (size_t)h.numel, h.name) || !check_values(r, &h, in->values)) return r->status;
    TgCheckpointTensorInfo *e = &in->list[index];
    snprintf(e->name, sizeof e->name, "%s", h.name);
    e->kind = h.kind;
    e->ndim = (int)h.ndim;
    memcpy(e->shape, h.shape, sizeof e->shape);
    double sum = 0.0;
    for (int64_t i = 0; i < h.numel; i++) sum += (double)in->values[i] * in->values[i];
    e->l2_norm = sqrt(sum);
    return TG_OK;
}

TgStatus tg_checkpoint_inspect(const char *path, TgCheckpointInfo *info, TgCheckpointTensorInfo **tensors, int *n_tensors) {
    Reader r;
    TgCheckpointInfo ci;
    memset(&ci, 0, sizeof ci);
    Inspection in = {0};
    uint32_t count = 0;
    *tensors = NULL;
    *n_tensors = 0;
    TgStatus s = reader_open(&r, path);
    if (s == TG_OK) s = read_any_header(&r, &ci, &count);
    for (uint32_t n = 0; s == TG_OK && n < count; n++) s = inspect_record(&r, n, &in);
    if (s == TG_OK) s = read_trailer(&r, &ci.state, path);
    if (s == TG_OK) {
        info_of_stream(&r, count, &ci);
        *info = ci;
        *tensors = in.list;
        *n_tensors = (int)count;
        in.list = NULL;
    }
    free(in.list);
    free(in.values);
    reader_close(&r);
    return s;
}
