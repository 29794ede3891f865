#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static const char MAGIC[8] = {'T', 'G', 'C', 'K', 'P', 'T', '\r', '\n'};
static const char END_MARK[8] = {'T', 'G', 'E', 'N', 'D', '\r', '\n', '\0'};
enum { KIND_WEIGHT = 0, KIND_ADAM_M = 1, KIND_ADAM_V = 2 };

/* ---------------------------------------------------------------- writing */

typedef struct {
    gzFile gz;
    int failed;
} Writer;

static void put(Writer *w, const void *p, size_t n) {
    const unsigned char *b = p;
    while (!w->failed && n > 0) {
        unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
        int wrote = gzwrite(w->gz, b, chunk);
        if (wrote <= 0) w->failed = 1;
        b += chunk;
        n -= chunk;
    }
}
static void put_u8(Writer *w, uint8_t x) { put(w, &x, 1); }
static void put_u16(Writer *w, uint16_t x) { put(w, &x, 2); }
static void put_u32(Writer *w, uint32_t x) { put(w, &x, 4); }
static void put_i64(Writer *w, int64_t x) { put(w, &x, 8); }
static void put_f64(Writer *w, double x) { put(w, &x, 8); }

static void put_config(Writer *w, const ModelConfig *c) {
    int64_t ints[7] = {c->dim, c->n_layers, c->n_heads, c->n_kv_heads, c->hidden, c->vocab, c->seq_len};
    for (int i = 0; i < 7; i++) put_i64(w, ints[i]);
    put_u32(w, (uint32_t)c->ffn);
    put_f64(w, c->rope_theta);
    put_f64(w, c->norm_eps);
}

static void put_state(Writer *w, const TrainerState *s) {
    put_i64(w, s->step);
    put_i64(w, s->tokens_seen);
    uint8_t loader[LOADER_STATE_BYTES];
    loader_state_pack(&s->loader, loader);
    put(w, loader, sizeof loader);
    put_f64(w, s->best_val_loss);
    put_f64(w, s->elapsed_s);
    put(w, &s->seed, 8);
}

static void put_tensor(Writer *w, const Tensor *t, uint8_t kind, const float *data) {
    uint16_t len = (uint16_t)strlen(t->name);
    put_u16(w, len);
    put(w, t->name, len);
    put_u8(w, kind);
    put_u32(w, (uint32_t)t->ndim);
    for (int d = 0; d < t->ndim; d++) put_i64(w, t->shape[d]);
    put(w, data, (size_t)t->numel * sizeof(float));
}

static tg_status fsync_dir_of(const char *path) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return tg_fail(TG_ERR_IO, "%s: cannot open folder to sync: %s", dir, strerror(errno));
    fsync(fd);
    close(fd);
    return TG_OK;
}

tg_status checkpoint_write(const char *path, const Model *model, uint64_t tokenizer_fingerprint,
                           const TrainerState *state) {
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return tg_fail(TG_ERR_ARG, "checkpoint path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return tg_fail(TG_ERR_IO, "cannot write checkpoint %s: %s", tmp, strerror(errno));
    int gzfd = dup(fd);
    Writer w = {gzdopen(gzfd, "wb6"), 0};
    if (!w.gz) {
        close(gzfd);
        close(fd);
        unlink(tmp);
        return tg_fail(TG_ERR_IO, "cannot start gzip stream in %s", tmp);
    }
    gzbuffer(w.gz, 1 << 20);
    const ParamStore *ps = &model->params;
    put(&w, MAGIC, sizeof MAGIC);
    put_u32(&w, CHECKPOINT_VERSION);
    put_config(&w, &model->cfg);
    put(&w, &tokenizer_fingerprint, 8);
    put_u32(&w, (uint32_t)(3 * ps->count));
    const float *bufs[3] = {ps->data, ps->m, ps->v};
    for (int kind = 0; kind < 3; kind++)
        for (int i = 0; i < ps->count; i++)
            put_tensor(&w, ps->tensors[i], (uint8_t)kind, bufs[kind] + ps->offsets[i]);
    put_state(&w, state);
    put(&w, END_MARK, sizeof END_MARK);
    int close_rc = gzclose(w.gz);
    int sync_rc = fsync(fd);
    int err = errno;
    close(fd);
    if (w.failed || close_rc != Z_OK || sync_rc != 0) {
        unlink(tmp);
        return tg_fail(TG_ERR_IO, "writing checkpoint %s failed (%s); the previous checkpoint is untouched", tmp,
                       sync_rc ? strerror(err) : "disk full or I/O error");
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        unlink(tmp);
        return tg_fail(TG_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(err));
    }
    return fsync_dir_of(path);
}

/* ---------------------------------------------------------------- reading */

typedef struct {
    gzFile gz;
    const char *path;
    tg_status status;
} Reader;

static tg_status read_fail(Reader *r, const char *what) {
    if (r->status != TG_OK) return r->status;
    int zerr = 0;
    const char *msg = gzerror(r->gz, &zerr);
    if (zerr == Z_DATA_ERROR || zerr == Z_BUF_ERROR || zerr == Z_ERRNO || (msg && *msg))
        r->status = tg_fail(TG_ERR_FORMAT, "%s: corrupt or truncated checkpoint while reading %s (%s)", r->path,
                            what, msg && *msg ? msg : "unexpected end of file");
    else
        r->status = tg_fail(TG_ERR_FORMAT, "%s: truncated checkpoint: the file ends inside %s", r->path, what);
    return r->status;
}

static bool get(Reader *r, void *p, size_t n, const char *what) {
    if (r->status != TG_OK) return false;
    unsigned char *b = p;
    while (n > 0) {
        unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
        int got = gzread(r->gz, b, chunk);
        if (got != (int)chunk) {
            read_fail(r, what);
            return false;
        }
        b += chunk;
        n -= chunk;
    }
    return true;
}

static tg_status reader_open(Reader *r, const char *path) {
    memset(r, 0, sizeof *r);
    r->path = path;
    struct stat st;
    if (stat(path, &st) != 0)
        return tg_fail(TG_ERR_IO, "%s: cannot open checkpoint: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return tg_fail(TG_ERR_ARG, "%s is a folder; pass a checkpoint file, or a run folder to --resume/--run", path);
    if (st.st_size == 0) return tg_fail(TG_ERR_FORMAT, "%s: empty file, not a checkpoint", path);
    FILE *f = fopen(path, "rb");
    if (!f) return tg_fail(TG_ERR_IO, "%s: cannot open checkpoint: %s", path, strerror(errno));
    unsigned char head[2] = {0, 0};
    size_t got = fread(head, 1, 2, f);
    fclose(f);
    if (got < 2 || head[0] != 0x1f || head[1] != 0x8b)
        return tg_fail(TG_ERR_FORMAT, "%s: not a gzip file, so not a tapegrad checkpoint", path);
    r->gz = gzopen(path, "rb");
    if (!r->gz) return tg_fail(TG_ERR_IO, "%s: cannot open checkpoint: %s", path, strerror(errno));
    gzbuffer(r->gz, 1 << 20);
    char magic[8];
    if (!get(r, magic, 8, "the header")) return r->status;
    if (memcmp(magic, MAGIC, 8) != 0)
        return r->status = tg_fail(TG_ERR_FORMAT, "%s: gzip file without the tapegrad checkpoint magic", path);
    uint32_t version = 0;
    if (!get(r, &version, 4, "the header")) return r->status;
    if (version != CHECKPOINT_VERSION)
        return r->status = tg_fail(TG_ERR_FORMAT,
                                   "%s: checkpoint format version %u, this tapegrad reads version %d%s", path,
                                   version, CHECKPOINT_VERSION, version > CHECKPOINT_VERSION ? " (a newer tapegrad wrote it)" : "");
    return TG_OK;
}

static bool get_config(Reader *r, ModelConfig *c) {
    int64_t ints[7];
    uint32_t ffn;
    if (!get(r, ints, sizeof ints, "the model config") || !get(r, &ffn, 4, "the model config") ||
        !get(r, &c->rope_theta, 8, "the model config") || !get(r, &c->norm_eps, 8, "the model config"))
        return false;
    c->dim = ints[0], c->n_layers = ints[1], c->n_heads = ints[2], c->n_kv_heads = ints[3];
    c->hidden = ints[4], c->vocab = ints[5], c->seq_len = ints[6];
    c->ffn = (FfnKind)ffn;
    if (model_config_validate(c) != TG_OK) {
        r->status = tg_fail_context(TG_ERR_FORMAT, "%s: invalid model config in checkpoint", r->path);
        return false;
    }
    return true;
}

static bool get_state(Reader *r, TrainerState *s) {
    memset(s, 0, sizeof *s);
    const char *w = "the trainer state";
    uint8_t loader[LOADER_STATE_BYTES];
    bool ok = get(r, &s->step, 8, w) && get(r, &s->tokens_seen, 8, w) && get(r, loader, sizeof loader, w) &&
              get(r, &s->best_val_loss, 8, w) && get(r, &s->elapsed_s, 8, w) && get(r, &s->seed, 8, w);
    if (ok) loader_state_unpack(loader, &s->loader);
    return ok;
}

tg_status checkpoint_read_config(const char *path, ModelConfig *cfg, uint64_t *tokenizer_fingerprint) {
    Reader r;
    tg_status s = reader_open(&r, path);
    if (s == TG_OK && get_config(&r, cfg)) get(&r, tokenizer_fingerprint, 8, "the header");
    s = r.status;
    if (r.gz) gzclose(r.gz);
    return s;
}

static bool same_config(const ModelConfig *a, const ModelConfig *b) {
    return a->dim == b->dim && a->n_layers == b->n_layers && a->n_heads == b->n_heads &&
           a->n_kv_heads == b->n_kv_heads && a->hidden == b->hidden && a->vocab == b->vocab &&
           a->seq_len == b->seq_len && a->ffn == b->ffn && a->rope_theta == b->rope_theta &&
           a->norm_eps == b->norm_eps;
}

tg_status checkpoint_load(const char *path, Model *model, CheckpointInfo *info) {
    Reader r;
    tg_status s = reader_open(&r, path);
    if (s != TG_OK) {
        if (r.gz) gzclose(r.gz);
        return s;
    }
    CheckpointInfo ci;
    memset(&ci, 0, sizeof ci);
    const ParamStore *ps = &model->params;
    float *staged[3] = {NULL, NULL, NULL};
    bool *seen = NULL;
    uint32_t count = 0;
    if (!get_config(&r, &ci.cfg) || !get(&r, &ci.tokenizer_fingerprint, 8, "the header")) goto done;
    if (!same_config(&ci.cfg, &model->cfg)) {
        r.status = tg_fail(TG_ERR_MISMATCH,
                           "%s: the checkpoint's model (dim %lld, layers %lld, heads %lld/%lld, hidden %lld, vocab %lld, "
                           "seq %lld) differs from the one asked for (dim %lld, layers %lld, heads %lld/%lld, hidden %lld, "
                           "vocab %lld, seq %lld)",
                           path, (long long)ci.cfg.dim, (long long)ci.cfg.n_layers, (long long)ci.cfg.n_heads,
                           (long long)ci.cfg.n_kv_heads, (long long)ci.cfg.hidden, (long long)ci.cfg.vocab,
                           (long long)ci.cfg.seq_len, (long long)model->cfg.dim, (long long)model->cfg.n_layers,
                           (long long)model->cfg.n_heads, (long long)model->cfg.n_kv_heads, (long long)model->cfg.hidden,
                           (long long)model->cfg.vocab, (long long)model->cfg.seq_len);
        goto done;
    }
    if (!get(&r, &count, 4, "the tensor count")) goto done;
    if (count != (uint32_t)(3 * ps->count)) {
        r.status = tg_fail(TG_ERR_FORMAT, "%s: holds %u tensors, the model needs %d (weights and two AdamW moments)",
                           path, count, 3 * ps->count);
        goto done;
    }
    for (int k = 0; k < 3; k++) staged[k] = tg_malloc(ps->total * sizeof(float) + 4);
    seen = tg_calloc((size_t)(3 * ps->count), sizeof *seen);
    for (uint32_t n = 0; n < count; n++) {
        uint16_t len;
        char name[TG_NAME_CAP + 1];
        uint8_t kind;
        uint32_t ndim;
        if (!get(&r, &len, 2, "a tensor header")) goto done;
        if (len > TG_NAME_CAP) {
            r.status = tg_fail(TG_ERR_FORMAT, "%s: tensor %u has a %u-byte name; the file is corrupt", path, n, len);
            goto done;
        }
        if (!get(&r, name, len, "a tensor name") || !get(&r, &kind, 1, "a tensor header") ||
            !get(&r, &ndim, 4, "a tensor header"))
            goto done;
        name[len] = '\0';
        int idx = params_index(ps, name);
        if (idx < 0 || kind > KIND_ADAM_V) {
            r.status = tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' (kind %u) is not part of this model", path, name, kind);
            goto done;
        }
        const Tensor *t = ps->tensors[idx];
        int64_t shape[TG_MAX_DIMS] = {0};
        if (ndim > TG_MAX_DIMS || !get(&r, shape, 8 * (size_t)(ndim > TG_MAX_DIMS ? 0 : ndim), "a tensor shape"))
            goto shape_error;
        bool same = (int)ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = shape[d] == t->shape[d];
        if (!same) {
        shape_error:
            if (r.status == TG_OK) {
                char want[64];
                r.status = tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s' has a different shape than the model's %s", path,
                                   name, tensor_shape_str(t, want, sizeof want));
            }
            goto done;
        }
        if (seen[kind * ps->count + idx]) {
            r.status = tg_fail(TG_ERR_FORMAT, "%s: tensor '%s' appears twice", path, name);
            goto done;
        }
        seen[kind * ps->count + idx] = true;
        if (!get(&r, staged[kind] + ps->offsets[idx], (size_t)t->numel * sizeof(float), name)) goto done;
    }
    if (!get_state(&r, &ci.state)) goto done;
    char end[8];
    if (!get(&r, end, 8, "the end marker")) goto done;
    if (memcmp(end, END_MARK, 8) != 0) {
        r.status = tg_fail(TG_ERR_FORMAT, "%s: end marker missing; the file is corrupt", path);
        goto done;
    }
    /* reading past the end makes zlib check the CRC32 and length trailer */
    char extra;
    int more = gzread(r.gz, &extra, 1);
    if (more != 0) {
        if (more < 0) read_fail(&r, "the gzip trailer");
        else r.status = tg_fail(TG_ERR_FORMAT, "%s: unexpected data after the end marker", path);
        goto done;
    }
    for (int i = 0; i < ps->count; i++) {
        const Tensor *t = ps->tensors[i];
        for (int k = 0; k < 3; k++)
            if (!seen[k * ps->count + i]) {
                r.status = tg_fail(TG_ERR_MISMATCH, "%s: tensor '%s'%s is missing", path, t->name,
                                   k == 0 ? "" : k == 1 ? " (AdamW m)" : " (AdamW v)");
                goto done;
            }
    }
    /* everything checked: only now touch the model */
    memcpy(ps->data, staged[0], ps->total * sizeof(float));
    memcpy(ps->m, staged[1], ps->total * sizeof(float));
    memcpy(ps->v, staged[2], ps->total * sizeof(float));
    ci.n_tensors = (int)count;
    ci.raw_bytes = (int64_t)gztell(r.gz);
    if (info) *info = ci;
done:
    for (int k = 0; k < 3; k++) free(staged[k]);
    free(seen);
    gzclose(r.gz);
    return r.status;
}

/* ---------------------------------------------------------------- run folders */

static int ckpt_step_of(const char *name, int64_t *step) {
    long long s;
    int end = 0;
    if (sscanf(name, "ckpt-%lld.tgck%n", &s, &end) == 1 && name[end] == '\0') {
        *step = s;
        return 1;
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static tg_status write_latest(const char *dir, const char *name) {
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/latest", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return tg_fail(TG_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "%s\n", name);
    int ok = fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return tg_fail(TG_ERR_IO, "cannot update %s: %s", path, strerror(errno));
    }
    return fsync_dir_of(path);
}

tg_status checkpoint_save_in_run(const char *dir, const Model *model, uint64_t tokenizer_fingerprint,
                                 const TrainerState *state, int keep, char *path_out, size_t path_cap) {
    char name[64], path[4096];
    snprintf(name, sizeof name, "ckpt-%08lld.tgck", (long long)state->step);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    TG_TRY(checkpoint_write(path, model, tokenizer_fingerprint, state));
    TG_TRY(write_latest(dir, name));
    if (path_out) snprintf(path_out, path_cap, "%s", path);
    if (keep <= 0) return TG_OK;
    /* keep the newest `keep`; the one just written is the newest, so it always stays */
    DIR *d = opendir(dir);
    if (!d) return TG_OK;
    int64_t steps[4096];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096) {
        int64_t s;
        if (ckpt_step_of(e->d_name, &s)) steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof steps[0], cmp_i64);
    for (int i = 0; i + keep < n; i++) {
        if (steps[i] == state->step) continue;
        snprintf(path, sizeof path, "%s/ckpt-%08lld.tgck", dir, (long long)steps[i]);
        unlink(path);
    }
    return TG_OK;
}

tg_status checkpoint_resolve(const char *dir_or_file, char *path_out, size_t path_cap) {
    struct stat st;
    if (stat(dir_or_file, &st) != 0)
        return tg_fail(TG_ERR_IO, "%s: no such checkpoint file or run folder", dir_or_file);
    if (!S_ISDIR(st.st_mode)) {
        snprintf(path_out, path_cap, "%s", dir_or_file);
        return TG_OK;
    }
    char latest[4096], name[256] = "";
    snprintf(latest, sizeof latest, "%s/latest", dir_or_file);
    FILE *f = fopen(latest, "r");
    if (!f)
        return tg_fail(TG_ERR_IO, "%s: folder holds no checkpoint (no 'latest' file); train into it first or pass a .tgck file",
                       dir_or_file);
    if (!fgets(name, sizeof name, f)) name[0] = '\0';
    fclose(f);
    name[strcspn(name, "\r\n")] = '\0';
    int64_t step;
    if (!ckpt_step_of(name, &step))
        return tg_fail(TG_ERR_FORMAT, "%s: does not name a checkpoint ('%s')", latest, name);
    snprintf(path_out, path_cap, "%s/%s", dir_or_file, name);
    return TG_OK;
}
