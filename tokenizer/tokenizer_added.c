/* Finding added tokens in text: at the leftmost position where one starts, the longest that
 * starts there (tokenizer.h), in time linear in the text however many tokens there are.
 *
 * Comparing every token at every position costs (positions x tokens): 65,535 added tokens made
 * preparing a 171 kB corpus take 35-50 s. Instead, for each position p the longest token
 * starting at p is read off an Aho-Corasick automaton of the *reversed* tokens while the text is
 * scanned from right to left: after reading text[p], the reversed tokens that end the reversed
 * text read so far are exactly the tokens that start at p, and the longest of them is the
 * state's own token or, failing that, the one its failure link's state holds (`out`, computed
 * once). A scan costs one transition a byte plus failure steps, which never outnumber the bytes
 * read (each failure step shortens the state's depth, each byte lengthens it by at most one).
 *
 * The text is scanned in windows: positions [lo, hi) need the bytes up to hi + L - 1 (L: the
 * longest token), so a window of W >= 2L positions costs at most 1.5 W steps, and the windows
 * never overlap because the encoder asks for positions in increasing order. The memory is one
 * int32 a window position, at most the text's length.
 *
 * The trie is stored breadth first: the children of node u are the nodes
 * [first_child[u], first_child[u + 1]), in byte order (binary search), built level by level from
 * the reversed tokens in sorted order, where the tokens under a node form one contiguous range.
 * 13 bytes a node; nodes are at most the tokens' bytes plus one.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"

struct TgAddedMatcher {
    int32_t n_nodes;
    uint8_t *byte;        /* the byte on the edge into each node (node 0, the root, has none) */
    int32_t *first_child; /* n_nodes + 1 entries */
    int32_t *fail;        /* the node of the longest proper suffix of the node's string */
    int32_t *out;         /* the longest token that is a suffix of the node's string: an index of tok->added, or -1 */
    int32_t root_child[256];
    size_t max_len;
};

void tg_added_matcher_free(TgAddedMatcher *m) {
    if (!m) return;
    free(m->byte), free(m->first_child), free(m->fail), free(m->out);
    free(m);
}

/* ---- building ------------------------------------------------------------------------------ */

/* A token's bytes, for building. */
typedef struct {
    const uint8_t *b;
    size_t len;
} Bytes;

/* Reversed token a before reversed token b. */
static bool reversed_before(Bytes a, Bytes b) {
    for (size_t i = 0; i < a.len && i < b.len; i++)
        if (a.b[a.len - 1 - i] != b.b[b.len - 1 - i]) return a.b[a.len - 1 - i] < b.b[b.len - 1 - i];
    return a.len < b.len;
}

/* Sorts the token indices by their reversed bytes (a merge sort: qsort takes no context). */
static void sort_reversed(const Bytes *tokens, int32_t *order, int32_t *tmp, int32_t n) {
    for (int32_t width = 1; width < n; width *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * width) {
            int32_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
            int32_t i = lo, j = mid, o = lo;
            while (i < mid && j < hi) tmp[o++] = reversed_before(tokens[order[j]], tokens[order[i]]) ? order[j++] : order[i++];
            while (i < mid) tmp[o++] = order[i++];
            while (j < hi) tmp[o++] = order[j++];
        }
        memcpy(order, tmp, (size_t)n * sizeof *order);
    }
}

/* The child of node u along byte c, or -1. */
static int32_t child_of(const TgAddedMatcher *m, int32_t u, uint8_t c) {
    if (u == 0) return m->root_child[c];
    int32_t lo = m->first_child[u], hi = m->first_child[u + 1];
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (m->byte[mid] < c) lo = mid + 1;
        else hi = mid;
    }
    return lo < m->first_child[u + 1] && m->byte[lo] == c ? lo : -1;
}

typedef struct {
    int32_t lo, hi; /* the tokens under a node: order[lo, hi) */
    size_t depth;
} Pending;

/* The trie, breadth first: each node's tokens (sorted[lo, hi), the tokens in sorted order) are
 * split by their byte at the node's depth. */
static void build_trie(TgAddedMatcher *m, const Bytes *sorted, const int32_t *order, Pending *queue, int32_t n) {
    size_t head = 0, tail = 0, cap = 2 * (size_t)n + 2; /* a level's ranges are disjoint: at most n a level */
    queue[tail++] = (Pending){0, n, 0};
    m->n_nodes = 1;
    m->byte[0] = 0;
    for (int32_t u = 0; head != tail; u++) {
        Pending p = queue[head];
        head = (head + 1) % cap;
        m->out[u] = -1;
        if (p.lo < p.hi && sorted[p.lo].len == p.depth) m->out[u] = order[p.lo++]; /* the token ending here sorts first */
        m->first_child[u] = m->n_nodes;
        for (int32_t g = p.lo; g < p.hi;) {
            uint8_t c = sorted[g].b[sorted[g].len - 1 - p.depth];
            int32_t end = g + 1;
            while (end < p.hi && sorted[end].b[sorted[end].len - 1 - p.depth] == c) end++;
            int32_t v = m->n_nodes++;
            m->byte[v] = c;
            queue[tail] = (Pending){g, end, p.depth + 1};
            tail = (tail + 1) % cap;
            g = end;
        }
    }
    m->first_child[m->n_nodes] = m->n_nodes;
}

/* Failure links and outputs, breadth first: a node's failure link is shallower, so done. */
static void link_trie(TgAddedMatcher *m) {
    for (int c = 0; c < 256; c++) m->root_child[c] = -1;
    for (int32_t v = m->first_child[0]; v < m->first_child[1]; v++) m->root_child[m->byte[v]] = v;
    m->fail[0] = 0;
    for (int32_t u = 0; u < m->n_nodes; u++) {
        for (int32_t v = m->first_child[u]; v < m->first_child[u + 1]; v++) {
            int32_t f = 0;
            if (u != 0) {
                for (f = m->fail[u];; f = m->fail[f]) {
                    int32_t w = child_of(m, f, m->byte[v]);
                    if (w >= 0) {
                        f = w;
                        break;
                    }
                    if (f == 0) break;
                }
            }
            m->fail[v] = f;
            if (m->out[v] < 0) m->out[v] = m->out[f];
        }
    }
}

TgStatus tg_added_matcher_build(const TgTokenizer *tok, bool words_only, TgAddedMatcher **matcher) {
    *matcher = NULL;
    int32_t n = tok->n_added, n_in = 0; /* the tokens the automaton finds: n_in of the n */
    size_t bytes = 0, max_len = 0;
    for (int32_t k = 0; k < n; k++) {
        if (words_only && tok->added[k].special) continue;
        size_t len;
        tg_tokenizer_token_bytes(tok, tok->added[k].id, &len);
        bytes += len;
        if (len > max_len) max_len = len;
        n_in++;
    }
    if (n_in == 0) return TG_OK;
    TG_CHECK(bytes < INT32_MAX, "added tokens of %zu bytes in all (a tokenizer.json holds at most 256 MiB)", bytes);
    size_t nodes = bytes + 1;
    TgAddedMatcher *m = calloc(1, sizeof *m);
    int32_t *order = malloc((size_t)n * sizeof *order), *tmp = malloc((size_t)n * sizeof *tmp);
    Bytes *tokens = malloc((size_t)n * sizeof *tokens), *sorted = malloc((size_t)n * sizeof *sorted);
    Pending *queue = malloc((2 * (size_t)n + 2) * sizeof *queue);
    if (m) {
        m->byte = malloc(nodes);
        m->first_child = malloc((nodes + 1) * sizeof *m->first_child);
        m->fail = malloc(nodes * sizeof *m->fail);
        m->out = malloc(nodes * sizeof *m->out);
    }
    TgStatus s = TG_OK;
    if (!m || !order || !tmp || !tokens || !sorted || !queue || !m->byte || !m->first_child || !m->fail || !m->out) {
        tg_added_matcher_free(m);
        s = tg_fail(TG_ERR_NOMEM, "the matcher of %" PRId32 " added tokens, %zu MiB", n, nodes * 13 >> 20);
    } else {
        for (int32_t k = 0, i = 0; k < n; k++) {
            tokens[k].b = tg_tokenizer_token_bytes(tok, tok->added[k].id, &tokens[k].len);
            if (!words_only || !tok->added[k].special) order[i++] = k;
        }
        sort_reversed(tokens, order, tmp, n_in);
        for (int32_t i = 0; i < n_in; i++) sorted[i] = tokens[order[i]];
        build_trie(m, sorted, order, queue, n_in);
        link_trie(m);
        m->max_len = max_len;
        *matcher = m;
    }
    free(order), free(tmp), free(tokens), free(sorted), free(queue);
    return s;
}

/* ---- scanning ------------------------------------------------------------------------------ */

enum { MIN_WINDOW = 1 << 16 };

void tg_added_scan_begin(TgAddedScan *s, const TgTokenizer *tok, const uint8_t *text, size_t len, bool literal) {
    memset(s, 0, sizeof *s);
    s->tok = tok;
    s->m = literal ? tok->word_matcher : tok->matcher;
    s->text = text;
    s->len = len;
    if (!s->m) return;
    size_t w = 2 * s->m->max_len > MIN_WINDOW ? 2 * s->m->max_len : MIN_WINDOW;
    s->window = w < len ? w : len;
    s->longest = tg_malloc((s->window ? s->window : 1) * sizeof *s->longest);
}

void tg_added_scan_end(TgAddedScan *s) {
    free(s->longest);
    s->longest = NULL;
}

/* longest[p - lo] for p in [lo, hi): the longest added token starting at p, or -1. */
static void scan_window(TgAddedScan *s, size_t lo) {
    const TgAddedMatcher *m = s->m;
    size_t hi = lo + s->window < s->len ? lo + s->window : s->len;
    size_t from = hi + m->max_len - 1 < s->len ? hi + m->max_len - 1 : s->len;
    int32_t state = 0;
    for (size_t p = from; p-- > lo;) {
        uint8_t c = s->text[p];
        int32_t next;
        while ((next = child_of(m, state, c)) < 0 && state != 0) {
            state = m->fail[state];
            s->steps++;
        }
        state = next < 0 ? 0 : next;
        s->steps++;
        if (p < hi) s->longest[p - lo] = m->out[state];
    }
    s->lo = lo;
    s->hi = hi;
}

bool tg_added_scan_next(TgAddedScan *s, size_t from, size_t *at, int32_t *id, size_t *match_len) {
    if (!s->m) return false;
    for (size_t p = from; p < s->len; p++) {
        if (p < s->lo || p >= s->hi) scan_window(s, p);
        int32_t k = s->longest[p - s->lo];
        if (k >= 0) {
            *at = p;
            *id = s->tok->added[k].id;
            tg_tokenizer_token_bytes(s->tok, *id, match_len);
            return true;
        }
    }
    return false;
}
