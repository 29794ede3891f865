/* The rooms of the source tree depend on each other one way only:
 *     support <- lib <- ops <- tokenizer <- data <- model <- checkpoint <- run <- train <- export, inspect <- cli
 * and serve (the server, on run) <- cli (a room includes headers of its own and of the rooms to its
 * left; export, inspect and serve do not need each other). Every project include is written from
 * the top of the tree ("lib/kernels.h"), never with "../". The public headers sit together in
 * include/tapegrad/ ("tapegrad/tape.h"),
 * each belonging to the room that implements it (public_rooms below): they follow the same rule,
 * among themselves too. A room's subfolders (lib/isa/, cli/study/) are the room. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *room;
    const char *may_include; /* space-separated rooms */
} Rule;

static const Rule rules[] = {
    {"support", "support"},
    {"lib", "support lib"},
    {"ops", "support lib ops"},
    {"tokenizer", "support lib ops tokenizer"},
    {"data", "support lib ops tokenizer data"},
    {"model", "support lib ops tokenizer data model"},
    {"checkpoint", "support lib ops tokenizer data model checkpoint"},
    {"run", "support lib ops tokenizer data model checkpoint run"},
    {"train", "support lib ops tokenizer data model checkpoint run train"},
    {"export", "support lib ops tokenizer data model checkpoint run export"},
    {"inspect", "support lib ops tokenizer data model checkpoint run train inspect"},
    {"serve", "support lib ops tokenizer data model checkpoint run serve"},
    {"cli", "support lib ops tokenizer data model checkpoint run train export inspect serve cli"},
};

/* The room of each public header; a header of include/tapegrad/ missing here fails the test. */
static const struct {
    const char *header, *room;
} public_rooms[] = {
    {"version.h", "lib"}, {"error.h", "support"},  {"limits.h", "support"},   {"arena.h", "lib"},
    {"pool.h", "lib"},    {"rng.h", "lib"},        {"tensor.h", "lib"},   {"tape.h", "lib"},
    {"engine.h", "lib"},  {"params.h", "lib"},     {"gradcheck.h", "lib"}, {"op_list.h", "ops"},
    {"ops.h", "ops"},     {"op_check.h", "ops"},   {"tokenizer.h", "tokenizer"}, {"optim.h", "lib"},
    {"param_checkpoint.h", "checkpoint"}, {"model.h", "model"}, {"pretrained.h", "run"}, {"sample.h", "model"},
    {"tapegrad.h", "cli"}, /* the umbrella: everything, as a program sees it */
};

static const char *public_room(const char *header) {
    for (size_t i = 0; i < sizeof public_rooms / sizeof public_rooms[0]; i++)
        if (strcmp(public_rooms[i].header, header) == 0) return public_rooms[i].room;
    return NULL;
}

static const Rule *rule_of(const char *room) {
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(rules[i].room, room) == 0) return &rules[i];
    cr_assert_fail("no rule for room %s", room);
    return NULL;
}

static bool allowed(const Rule *r, const char *target_room) {
    char list[128];
    snprintf(list, sizeof list, " %s ", r->may_include);
    char needle[80];
    snprintf(needle, sizeof needle, " %s ", target_room);
    return strstr(list, needle) != NULL;
}

/* Checks one file; returns the number of violations (each printed). */
static int check_file(const Rule *r, const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    char line[1024];
    int bad = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        const char *inc = strstr(line, "#include \"");
        if (inc != line) continue;
        const char *name = inc + 10;
        const char *slash = strchr(name, '/'), *quote = strchr(name, '"');
        if (strncmp(name, "../", 3) == 0 || !slash || (quote && slash > quote)) {
            fprintf(stderr, "%s:%d: include \"%.*s\" is not written from the top of the tree\n", path, lineno,
                    quote ? (int)(quote - name) : 40, name);
            bad++;
            continue;
        }
        char room[64];
        snprintf(room, sizeof room, "%.*s", (int)(slash - name), name);
        if (strcmp(room, "tapegrad") == 0) {
            char header[128];
            snprintf(header, sizeof header, "%.*s", quote ? (int)(quote - slash - 1) : 40, slash + 1);
            const char *owner = public_room(header);
            if (!owner) {
                fprintf(stderr, "%s:%d: includes \"tapegrad/%s\", which is not a public header\n", path, lineno, header);
                bad++;
                continue;
            }
            snprintf(room, sizeof room, "%s", owner);
        }
        if (!allowed(r, room)) {
            fprintf(stderr, "%s:%d: %s/ includes %s/ (the rooms: tests/test_layout.c)\n",
                    path, lineno, r->room, room);
            bad++;
        }
    }
    fclose(f);
    return bad;
}

/* Checks every .c and .h below dir_path (subfolders too) against the rule; counts them in *files. */
static int check_folder(const Rule *r, const char *dir_path, int *files) {
    DIR *d = opendir(dir_path);
    cr_assert_not_null(d, "no folder %s", dir_path);
    int bad = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
        size_t n = strlen(e->d_name);
        if (e->d_type == DT_DIR) bad += check_folder(r, path, files);
        else if (n > 2 && (strcmp(e->d_name + n - 2, ".c") == 0 || strcmp(e->d_name + n - 2, ".h") == 0)) {
            bad += check_file(r, path);
            (*files)++;
        }
    }
    closedir(d);
    return bad;
}

Test(layout, includes_follow_the_rooms) {
    int bad = 0, files = 0;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        char dir_path[4096];
        snprintf(dir_path, sizeof dir_path, "%s/%s", TAPEGRAD_SOURCE_DIR, rules[i].room);
        bad += check_folder(&rules[i], dir_path, &files);
    }
    char dir_path[4096];
    snprintf(dir_path, sizeof dir_path, "%s/include/tapegrad", TAPEGRAD_SOURCE_DIR);
    DIR *d = opendir(dir_path);
    cr_assert_not_null(d, "no folder %s", dir_path);
    struct dirent *e;
    int headers = 0;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 3 || strcmp(e->d_name + n - 2, ".h") != 0) continue;
        const char *room = public_room(e->d_name);
        if (!room) {
            fprintf(stderr, "include/tapegrad/%s: a public header with no room in tests/test_layout.c\n", e->d_name);
            bad++;
            continue;
        }
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
        bad += check_file(rule_of(room), path);
        headers++;
    }
    closedir(d);
    cr_expect_eq(headers, (int)(sizeof public_rooms / sizeof public_rooms[0]),
                 "%d public headers found, %d listed", headers, (int)(sizeof public_rooms / sizeof public_rooms[0]));
    cr_expect_gt(files, 50, "only %d source files found", files);
    cr_expect_eq(bad, 0, "%d includes break the layering (listed above)", bad);
}

/* The library (every room but cli/) never prints and never ends the process: what a person should
 * see reaches the program through statuses, messages and hooks (support/messages.h, the trainer's
 * reporter), and only cli/ writes to stdout/stderr or chooses an exit code. Writers that take a
 * FILE * their caller opened are fine; the one exception is the message of a broken invariant,
 * which support/error.c hands to the abort handler (tapegrad/error.h). Comments and string literals
 * are skipped. */
static const char *const forbidden[] = {"stdout", "stderr", "printf", "vprintf", "puts", "putchar", "perror",
                                        "exit",   "_exit",  "_Exit",  "quick_exit"};

/* `text` with comments blanked out, and string and character literals too unless `keep_literals`,
 * in place. */
static char *blank_code_text(char *text, bool keep_literals) {
    long n = (long)strlen(text);
    for (long i = 0; i < n; i++) {
        if (text[i] == '/' && text[i + 1] == '*') {
            for (; i < n && !(text[i] == '*' && text[i + 1] == '/'); i++)
                if (text[i] != '\n') text[i] = ' ';
            if (i < n) text[i] = text[i + 1] = ' ';
            i++;
        } else if (text[i] == '/' && text[i + 1] == '/') {
            for (; i < n && text[i] != '\n'; i++) text[i] = ' ';
        } else if (text[i] == '"' || text[i] == '\'') {
            char quote = text[i++];
            for (; i < n && text[i] != quote && text[i] != '\n'; i++) {
                if (keep_literals) {
                    i += text[i] == '\\';
                    continue;
                }
                if (text[i] == '\\') text[i++] = ' ';
                text[i] = ' ';
            }
        }
    }
    return text;
}

static char *blank_comments_and_literals(char *text) { return blank_code_text(text, false); }

/* A whole file, as a string. */
static char *read_whole(const char *path) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    cr_assert_eq(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* The file's code with comments and string and character literals blanked out. */
static char *code_of(const char *path) { return blank_comments_and_literals(read_whole(path)); }

static bool is_name_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Counts (and prints) the forbidden names used in the file's code. */
static int check_silent(const char *path, bool report) {
    char *code = code_of(path);
    int bad = 0, line = 1;
    for (const char *p = code; *p; p++) {
        if (*p == '\n') line++;
        if (!is_name_char(*p) || (p > code && is_name_char(p[-1]))) continue;
        for (size_t k = 0; k < sizeof forbidden / sizeof forbidden[0]; k++) {
            size_t len = strlen(forbidden[k]);
            /* __attribute__((format(printf, 2, 3))) names the checking, not a call */
            bool attribute = p - code >= 7 && strncmp(p - 7, "format(", 7) == 0;
            if (strncmp(p, forbidden[k], len) == 0 && !is_name_char(p[len]) && !attribute) {
                if (report) fprintf(stderr, "%s:%d: the library uses %s (only cli/ prints or exits)\n", path, line, forbidden[k]);
                bad++;
            }
        }
    }
    free(code);
    return bad;
}

Test(layout, the_library_never_prints_and_never_exits) {
    static const char *const rooms[] = {"include/tapegrad", "support", "lib", "lib/isa", "ops", "tokenizer", "data", "model",
                                        "checkpoint", "run", "train", "export", "inspect"};
    int bad = 0, files = 0;
    for (size_t i = 0; i < sizeof rooms / sizeof rooms[0]; i++) {
        char dir_path[4096];
        snprintf(dir_path, sizeof dir_path, "%s/%s", TAPEGRAD_SOURCE_DIR, rooms[i]);
        DIR *d = opendir(dir_path);
        cr_assert_not_null(d, "no folder %s", dir_path);
        for (struct dirent *e; (e = readdir(d));) {
            size_t n = strlen(e->d_name);
            if (n < 3 || (strcmp(e->d_name + n - 2, ".c") != 0 && strcmp(e->d_name + n - 2, ".h") != 0)) continue;
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
            bad += check_silent(path, true);
            files++;
        }
        closedir(d);
    }
    cr_expect_gt(files, 50, "only %d library files found", files);
    cr_expect_eq(bad, 0, "%d uses of stdout/stderr, printf/puts or exit in the library (listed above)", bad);
}

/* The scan above sees through comments and strings, and finds what it must. */
Test(layout, the_silence_check_finds_a_print_and_ignores_comments) {
    char path[] = "/tmp/tapegrad-layout-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    const char *text = "/* prints to stdout, then exit(1) */\n"
                       "static const char *s = \"printf(stderr)\";\n"
                       "int f(FILE *f) { return fprintf(f, \"x\") + my_exit_code + exited(); }\n"
                       "void g(void) __attribute__((format(printf, 1, 2)));\n"
                       "void h(void) { fputs(\"no\", stderr); _exit(2); }\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    cr_expect_eq(check_silent(path, false), 2, "stderr and _exit on the last line, nothing else");
    unlink(path);
}

/* ---------------------------------------------------------------- the naming rule */

/* Every name the library holds carries the prefix (docs/contributing.md): each function and
 * variable that libtapegrad.a defines for other files starts with tg_; each type a library header
 * declares starts with Tg, each macro and enum value with TG_ (or TAPEGRAD_ for include guards).
 * Only static names stay short. */
/* `nm FLAGS` of the library, to read from (pclose gives nm's exit status). */
static FILE *nm_of_library(const char *flags) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "nm %s '%s' 2>/dev/null", flags, TAPEGRAD_STATIC_LIB);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p, "cannot run nm");
    return p;
}

Test(layout, every_name_of_the_library_carries_the_prefix) {
    FILE *p = nm_of_library("-g --defined-only");
    char line[1024], where[1024] = "";
    int symbols = 0, bad = 0;
    while (fgets(line, sizeof line, p)) {
        char addr[64], type[8], name[512];
        size_t n = strlen(line);
        if (n >= 2 && line[n - 2] == ':') { /* "libtapegrad.a[file.c.o]:" heads each member */
            snprintf(where, sizeof where, "%.*s", (int)n - 2, line);
            continue;
        }
        if (sscanf(line, "%63s %7s %511s", addr, type, name) != 3 || !strchr("TDBRC", type[0])) continue;
        symbols++;
        /* what a sanitizer build adds beside each global (__odr_asan.NAME, ...) is the compiler's */
        bool generated = strncmp(name, "__odr_asan", 10) == 0 || strncmp(name, "__asan", 6) == 0 ||
                         strncmp(name, "__ubsan", 7) == 0 || strncmp(name, "__sancov", 8) == 0;
        if (!generated && strncmp(name, "tg_", 3) != 0) {
            fprintf(stderr, "%s: %s has no tg_ prefix\n", where, name);
            bad++;
        }
    }
    cr_assert_eq(pclose(p), 0, "nm failed on %s", TAPEGRAD_STATIC_LIB);
    cr_expect_gt(symbols, 500, "nm listed only %d symbols", symbols);
    cr_expect_eq(bad, 0, "%d symbols of libtapegrad.a without the tg_ prefix (listed above)", bad);
}

/* Whether the brace at `close` ends a typedef (typedef struct { ... } Name;), not a member
 * declared inside one (union { ... } reader;). */
static bool closes_a_typedef(const char *code, const char *close) {
    int depth = 0;
    const char *p = close;
    for (; p > code; p--) {
        if (*p == '}')
            depth++;
        else if (*p == '{' && --depth == 0)
            break;
    }
    const char *start = p;
    while (start > code && start[-1] != ';' && start[-1] != '}' && start[-1] != '{') start--;
    for (const char *q = start; q + 7 <= p; q++)
        if (strncmp(q, "typedef", 7) == 0 && !is_name_char(q[7]) && (q == code || !is_name_char(q[-1]))) return true;
    return false;
}

/* The names a header declares: types (after a typedef's closing brace), macros, enum values. */
static int check_header_names(const char *path, bool report) {
    char *code = code_of(path);
    int bad = 0;
    for (char *p = code; *p; p++) {
        char name[256];
        int n = 0;
        const char *kind = NULL;
        if (*p == '}' && sscanf(p + 1, " %255[A-Za-z0-9_] %n", name, &n) == 1 && p[1 + n] == ';' &&
            closes_a_typedef(code, p))
            kind = "type";
        else if (strncmp(p, "#define ", 8) == 0 && sscanf(p + 8, "%255[A-Za-z0-9_]", name) == 1) kind = "macro";
        if (kind) {
            bool ok = strcmp(kind, "type") == 0 ? strncmp(name, "Tg", 2) == 0
                                                : strncmp(name, "TG_", 3) == 0 || strncmp(name, "TAPEGRAD_", 9) == 0 ||
                                                      strncmp(name, "tg_", 3) == 0;
            if (!ok) {
                if (report) fprintf(stderr, "%s: the %s %s has no prefix\n", path, kind, name);
                bad++;
            }
        }
        if (strncmp(p, "enum", 4) == 0 && !is_name_char(p[4]) && (p == code || !is_name_char(p[-1]))) {
            char *open = strchr(p, '{'), *semi = strchr(p, ';');
            if (!open || (semi && semi < open)) continue;
            int depth = 0;
            for (char *q = open + 1; *q && *q != '}'; q++) {
                if (*q == '(') depth++;
                else if (*q == ')') depth--;
                if (depth || !(isalpha((unsigned char)*q) || *q == '_') || is_name_char(q[-1]) || q[-1] == '#') continue;
                char value[256];
                if (sscanf(q, "%255[A-Za-z0-9_]", value) != 1) continue;
                const char *before = q - 1;
                while (before > open && isspace((unsigned char)*before)) before--;
                if (*before == '{' || *before == ',') {
                    if (strncmp(value, "TG_", 3) != 0) {
                        if (report) fprintf(stderr, "%s: the enum value %s has no TG_ prefix\n", path, value);
                        bad++;
                    }
                }
                q += strlen(value) - 1;
            }
        }
    }
    free(code);
    return bad;
}

static int check_headers_below(const char *dir_path, int *headers) {
    DIR *d = opendir(dir_path);
    cr_assert_not_null(d, "no folder %s", dir_path);
    int bad = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
        size_t n = strlen(e->d_name);
        if (e->d_type == DT_DIR) bad += check_headers_below(path, headers);
        else if (n > 2 && strcmp(e->d_name + n - 2, ".h") == 0) {
            bad += check_header_names(path, true);
            (*headers)++;
        }
    }
    closedir(d);
    return bad;
}

Test(layout, every_type_macro_and_enum_value_of_a_library_header_carries_the_prefix) {
    static const char *const rooms[] = {"include/tapegrad", "support", "lib", "ops", "tokenizer", "data", "model",
                                        "checkpoint", "run", "train", "export", "inspect"};
    int bad = 0, headers = 0;
    for (size_t i = 0; i < sizeof rooms / sizeof rooms[0]; i++) {
        char dir_path[4096];
        snprintf(dir_path, sizeof dir_path, "%s/%s", TAPEGRAD_SOURCE_DIR, rooms[i]);
        bad += check_headers_below(dir_path, &headers);
    }
    cr_expect_gt(headers, 60, "only %d headers found", headers);
    cr_expect_eq(bad, 0, "%d names in library headers without their prefix (listed above)", bad);
}

/* The header scan finds what it must. */
Test(layout, the_name_check_finds_unprefixed_names) {
    char path[] = "/tmp/tapegrad-layout-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    const char *text = "/* typedef struct Run { int x; } Run; */\n"
                       "typedef struct TgRun { int x; } TgRun;\n"
                       "typedef struct { int y; union { int a; } u; } Loader;\n"
                       "#define TG_OK_MACRO 1\n#define BAD_MACRO 2\n"
                       "typedef enum { TG_A, B = (1 << 2), TG_C } TgE;\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    cr_expect_eq(check_header_names(path, false), 3, "Loader, BAD_MACRO and B, nothing else");
    unlink(path);
}

/* ---------------------------------------------------------------- no circle between files */

/* Which file of the library calls which: an edge a -> b when a.c uses a name b.c defines. A
 * circle (a -> ... -> a) means neither file can be read, tested or moved without the other;
 * the rooms' rule catches circles between folders, this one those inside a folder. */
enum { MAX_FILES = 512 };
typedef struct {
    char files[MAX_FILES][128];
    int n_files;
    struct Symbol { char name[160]; int file; } *defs, *uses;
    size_t n_defs, n_uses, cap_defs, cap_uses;
    bool edge[MAX_FILES][MAX_FILES];
} Calls;

static int file_index(Calls *c, const char *name) {
    for (int i = 0; i < c->n_files; i++)
        if (strcmp(c->files[i], name) == 0) return i;
    cr_assert_lt(c->n_files, MAX_FILES, "more than %d object files", MAX_FILES);
    snprintf(c->files[c->n_files], sizeof c->files[0], "%s", name);
    return c->n_files++;
}

static void add_symbol(struct Symbol **list, size_t *n, size_t *cap, const char *name, int file) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        *list = realloc(*list, *cap * sizeof **list);
        cr_assert_not_null(*list);
    }
    snprintf((*list)[*n].name, sizeof (*list)[0].name, "%s", name);
    (*list)[(*n)++].file = file;
}

static int by_name(const void *a, const void *b) { return strcmp(((const struct Symbol *)a)->name, ((const struct Symbol *)b)->name); }

/* Reads `nm -A` lines ("lib.a:file.c.o:ADDRESS T name", "lib.a:file.c.o:  U name") into the
 * files' edges. */
static void read_calls(FILE *nm, Calls *c) {
    char line[1024];
    while (fgets(line, sizeof line, nm)) {
        char *first = strchr(line, ':'), *second = first ? strchr(first + 1, ':') : NULL;
        if (!second) continue;
        *second = '\0';
        char a[512], b[512], name[512];
        char type = 0;
        int fields = sscanf(second + 1, "%511s %511s %511s", a, b, name);
        if (fields == 2 && strcmp(a, "U") == 0) /* "U name": no address */
            type = 'U', snprintf(name, sizeof name, "%s", b);
        else if (fields == 3 && strlen(b) == 1)
            type = b[0];
        else
            continue;
        int file = file_index(c, first + 1);
        if (type == 'U') add_symbol(&c->uses, &c->n_uses, &c->cap_uses, name, file);
        else if (strchr("TDBRC", type)) add_symbol(&c->defs, &c->n_defs, &c->cap_defs, name, file);
    }
    qsort(c->defs, c->n_defs, sizeof *c->defs, by_name);
    for (size_t i = 0; i < c->n_uses; i++) {
        struct Symbol *d = bsearch(&c->uses[i], c->defs, c->n_defs, sizeof *c->defs, by_name);
        if (d && d->file != c->uses[i].file) c->edge[c->uses[i].file][d->file] = true;
    }
}

/* The circles: every pair of files that reach each other, printed; their count. */
static int count_circles(Calls *c, bool report) {
    int n = c->n_files, pairs = 0;
    static bool reach[MAX_FILES][MAX_FILES];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) reach[i][j] = c->edge[i][j];
    for (int k = 0; k < n; k++)
        for (int i = 0; i < n; i++)
            if (reach[i][k])
                for (int j = 0; j < n; j++) reach[i][j] = reach[i][j] || reach[k][j];
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (reach[i][j] && reach[j][i]) {
                if (report) fprintf(stderr, "%s and %s call each other (through a circle of files)\n", c->files[i], c->files[j]);
                pairs++;
            }
    return pairs;
}

static void calls_free(Calls *c) {
    free(c->defs), free(c->uses);
    free(c);
}

Test(layout, no_two_files_of_the_library_call_each_other) {
    FILE *p = nm_of_library("-A");
    Calls *c = calloc(1, sizeof *c);
    read_calls(p, c);
    cr_assert_eq(pclose(p), 0, "nm failed on %s", TAPEGRAD_STATIC_LIB);
    int edges = 0;
    for (int i = 0; i < c->n_files; i++)
        for (int j = 0; j < c->n_files; j++) edges += c->edge[i][j];
    cr_expect_gt(c->n_files, 100, "nm listed only %d files", c->n_files);
    cr_expect_gt(edges, 300, "only %d calls between files were found", edges);
    cr_expect_eq(count_circles(c, true), 0, "files of libtapegrad.a call each other (listed above)");
    calls_free(c);
}

Test(layout, the_circle_check_finds_a_circle_of_three_files) {
    const char listing[] = "x.a:a.c.o:0000000000000000 T tg_a\n"
                           "x.a:a.c.o:                 U tg_b\n"
                           "x.a:b.c.o:0000000000000000 T tg_b\n"
                           "x.a:b.c.o:                 U tg_c\n"
                           "x.a:c.c.o:0000000000000000 T tg_c\n"
                           "x.a:d.c.o:                 U tg_a\n";
    FILE *f = fmemopen((void *)listing, sizeof listing - 1, "r");
    Calls *c = calloc(1, sizeof *c);
    read_calls(f, c);
    fclose(f);
    cr_expect_eq(count_circles(c, false), 0, "a -> b -> c and d -> a hold no circle");
    int a = file_index(c, "a.c.o"), b = file_index(c, "b.c.o"), cc = file_index(c, "c.c.o");
    cr_expect(c->edge[a][b] && c->edge[b][cc] && !c->edge[cc][a], "the calls read from the listing");
    c->edge[cc][a] = true; /* c.c now calls a.c: a circle of three files, three pairs */
    cr_expect_eq(count_circles(c, false), 3);
    calls_free(c);
}

/* ---------------------------------------------------------------- every file in the layout */

/* docs/contributing.md's layout names every source file: each .c, and each .h without a .c of
 * its name beside it; and every file it names exists. */

/* Calls visit(rel, ctx) for every .c and .h file below `dir` (a path from the top of the tree),
 * subfolders included. */
static void walk_sources(const char *dir, void (*visit)(const char *rel, void *ctx), void *ctx) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", TAPEGRAD_SOURCE_DIR, dir);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "cannot open %s", path);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || strcmp(e->d_name, "node_modules") == 0) continue; /* npm's, not ours */
        char rel[1024];
        snprintf(rel, sizeof rel, "%s/%s", dir, e->d_name);
        if (e->d_type == DT_DIR) walk_sources(rel, visit, ctx);
        else if (n >= 3 && e->d_name[n - 2] == '.' && (e->d_name[n - 1] == 'c' || e->d_name[n - 1] == 'h')) visit(rel, ctx);
    }
    closedir(d);
}

typedef struct {
    const char *doc;
    int files, missing;
} Listing;

/* A file the layout must name: a .c, or a .h without a .c of its name beside it. */
static void check_listed(const char *rel, void *ctx) {
    Listing *l = ctx;
    size_t n = strlen(rel);
    char twin[2048], quoted[1100];
    snprintf(twin, sizeof twin, "%s/%.*s.c", TAPEGRAD_SOURCE_DIR, (int)n - 2, rel);
    if (rel[n - 1] == 'h' && access(twin, F_OK) == 0) return; /* a header goes with its .c */
    l->files++;
    snprintf(quoted, sizeof quoted, "`%s`", rel);
    if (!strstr(l->doc, quoted)) {
        fprintf(stderr, "docs/contributing.md does not list %s\n", rel);
        l->missing++;
    }
}

Test(layout, the_contributing_layout_lists_every_source_file_and_no_other) {
    char path[2048];
    snprintf(path, sizeof path, "%s/docs/contributing.md", TAPEGRAD_SOURCE_DIR);
    char *doc = read_whole(path);
    char *start = strstr(doc, "\n## Layout\n"), *end = start ? strstr(start + 1, "\n## ") : NULL;
    cr_assert(start, "docs/contributing.md has no Layout section");
    if (end) *end = '\0';
    Listing listing = {start, 0, 0};
    static const char *const dirs[] = {"support", "lib", "ops", "tokenizer", "data", "model", "checkpoint", "run",
                                       "train", "export", "inspect", "serve", "cli", "include/tapegrad"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) walk_sources(dirs[i], check_listed, &listing);
    cr_expect_gt(listing.files, 100, "only %d source files found", listing.files);
    cr_expect_eq(listing.missing, 0, "%d source files missing from docs/contributing.md's layout (listed above)",
                 listing.missing);
    /* every `room/file.c` or `.h` it names exists */
    int stale = 0;
    for (const char *p = start; (p = strchr(p, '`'));) {
        const char *q = strchr(p + 1, '`');
        if (!q) break;
        size_t len = (size_t)(q - p - 1);
        bool source = len > 2 && len < 512 && p[len - 1] == '.' && (p[len] == 'c' || p[len] == 'h') && memchr(p + 1, '/', len);
        bool in_a_room = false; /* `tapegrad/tape.h` is an include path, not a file of the tree */
        for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
            in_a_room = in_a_room || (strncmp(p + 1, dirs[i], strlen(dirs[i])) == 0 && p[1 + strlen(dirs[i])] == '/');
        if (source && in_a_room && !memchr(p + 1, ' ', len)) {
            char file[2048];
            snprintf(file, sizeof file, "%s/%.*s", TAPEGRAD_SOURCE_DIR, (int)len, p + 1);
            if (access(file, F_OK) != 0) fprintf(stderr, "docs/contributing.md lists %.*s, which does not exist\n", (int)len, p + 1), stale++;
        }
        p = q + 1;
    }
    cr_expect_eq(stale, 0, "%d files listed in docs/contributing.md do not exist (listed above)", stale);
    free(doc);
}

/* ---------------------------------------------------------------- no room holds most of the code */

/* Adds the lines of the file `rel` to *(long *)ctx. */
static void count_lines(const char *rel, void *ctx) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", TAPEGRAD_SOURCE_DIR, rel);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    for (int c; (c = fgetc(f)) != EOF;) *(long *)ctx += c == '\n';
    fclose(f);
}

/* A room that grows past a fifth of the program's code holds more than one concern: split it
 * (as train/ was split into model/, checkpoint/, run/, export/ and train/). */
Test(layout, no_room_holds_more_than_a_fifth_of_the_code) {
    static const char *const rooms[] = {"support", "lib", "ops", "tokenizer", "data", "model", "checkpoint", "run",
                                        "train", "export", "inspect", "cli", "include"};
    enum { N = sizeof rooms / sizeof *rooms };
    long lines[N], total = 0;
    for (int i = 0; i < N; i++) {
        lines[i] = 0;
        walk_sources(rooms[i], count_lines, &lines[i]);
        total += lines[i];
    }
    cr_assert_gt(total, 20000, "only %ld lines of code found", total);
    for (int i = 0; i < N; i++)
        cr_expect_leq(lines[i] * 5, total, "%s/ holds %ld of the %ld lines (%.1f%%): more than a fifth", rooms[i], lines[i],
                     total, 100.0 * (double)lines[i] / (double)total);
}

/* ---------------------------------------------------------------- include guards name their folder */

/* The include guard a header must have, in capitals: TAPEGRAD_, its folder, the rest of its name,
 * _H; a name that starts with its folder's says it once (checkpoint/checkpoint_folder.h:
 * TAPEGRAD_CHECKPOINT_FOLDER_H, inspect/inspect.h: TAPEGRAD_INSPECT_H), and the public headers
 * carry the public prefix instead (include/tapegrad/tape.h: TG_TAPE_H, as test_exports wants of
 * their every macro). A header moved to another room then cannot keep the guard of the one it left. */
static void guard_wanted(const char *rel, char *out, size_t cap) {
    const char *slash = strrchr(rel, '/'), *folder = rel;
    for (const char *p = rel; p < slash; p++)
        if (*p == '/') folder = p + 1;
    char f[256], b[256];
    snprintf(f, sizeof f, "%.*s", (int)(slash - folder), folder);
    snprintf(b, sizeof b, "%.*s", (int)(strlen(slash + 1) - 2), slash + 1);
    for (char *s = f; *s; s++) *s = isalnum((unsigned char)*s) ? (char)toupper((unsigned char)*s) : '_';
    for (char *s = b; *s; s++) *s = isalnum((unsigned char)*s) ? (char)toupper((unsigned char)*s) : '_';
    size_t nf = strlen(f);
    if (strcmp(f, "TAPEGRAD") == 0)
        snprintf(out, cap, "TG_%s_H", b);
    else if (strcmp(b, f) == 0)
        snprintf(out, cap, "TAPEGRAD_%s_H", b);
    else if (strncmp(b, f, nf) == 0 && b[nf] == '_')
        snprintf(out, cap, "TAPEGRAD_%s_H", b);
    else
        snprintf(out, cap, "TAPEGRAD_%s_%s_H", f, b);
}

/* Whether `text` (a header) opens with `#ifndef G` / `#define G` for the guard its path wants;
 * *bad counts a header that does not, naming it. */
static void check_guard_text(const char *rel, const char *text, int *bad, bool report) {
    char want[600], open[1300];
    guard_wanted(rel, want, sizeof want);
    snprintf(open, sizeof open, "#ifndef %s\n#define %s\n", want, want);
    if (!strstr(text, open)) {
        const char *at = strstr(text, "#ifndef ");
        if (report)
            fprintf(stderr, "%s: its include guard is not %s (%.*s): name its folder\n", rel, want,
                    at ? (int)strcspn(at + 8, "\n") : 4, at ? at + 8 : "none");
        (*bad)++;
    }
}

static void check_guard(const char *rel, void *ctx) {
    size_t n = strlen(rel);
    if (rel[n - 1] != 'h') return;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", TAPEGRAD_SOURCE_DIR, rel);
    char *text = read_whole(path);
    int *bad = ctx;
    check_guard_text(rel, text, &bad[0], true);
    bad[1]++;
    free(text);
}

Test(layout, every_include_guard_names_its_folder) {
    static const char *const dirs[] = {"support",    "lib",     "ops",       "tokenizer", "data",   "model",
                                       "checkpoint", "run",     "train",     "export", "inspect",
                                       "cli",        "include", "examples",  "bench",  "tests"};
    int counts[2] = {0, 0};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) walk_sources(dirs[i], check_guard, counts);
    cr_expect_gt(counts[1], 80, "only %d headers found", counts[1]);
    cr_expect_eq(counts[0], 0, "%d of %d headers have an include guard that does not name their folder", counts[0],
                 counts[1]);
}

Test(layout, the_guard_check_finds_a_guard_of_another_room) {
    static const struct {
        const char *header, *guard;
    } cases[] = {{"export/export_gguf.h", "TAPEGRAD_EXPORT_GGUF_H"},
                 {"lib/isa/simd.h", "TAPEGRAD_ISA_SIMD_H"},
                 {"include/tapegrad/tape.h", "TG_TAPE_H"},
                 {"support/json_reader.h", "TAPEGRAD_SUPPORT_JSON_READER_H"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char want[600];
        guard_wanted(cases[i].header, want, sizeof want);
        cr_expect_str_eq(want, cases[i].guard);
    }
    int bad = 0;
    check_guard_text("support/json_reader.h", "#ifndef TAPEGRAD_DATA_JSON_READER_H\n#define TAPEGRAD_DATA_JSON_READER_H\n",
                     &bad, false);
    cr_expect_eq(bad, 1, "a guard naming data/ for a file of support/ passed");
    check_guard_text("support/json_reader.h", "#ifndef TAPEGRAD_SUPPORT_JSON_READER_H\n#define TAPEGRAD_SUPPORT_JSON_READER_H\n",
                     &bad, false);
    cr_expect_eq(bad, 1, "the right guard failed");
}

/* ---------------------------------------------------------------- no circle of includes */

/* Which unit includes which: a .c and the .h of its name are one unit (lib/cpu), a header named
 * X_internal.h belongs to X's unit, and a public header (include/tapegrad/tape.h) to the one file
 * of the rooms that implements it (lib/tape.c). Two units that reach each other through includes
 * (cpu.c includes kernels.h, which includes cpu.h) cannot be read or moved apart, whatever the
 * calls between them say; the rooms' rule catches such circles between folders, this one those
 * inside a folder. */
typedef struct {
    Calls *c;
    char (*impl)[128];   /* every X.c of the rooms, as "room/.../X" */
    int n_impl;
} Includes;

static void add_impl(const char *rel, void *ctx) {
    Includes *in = ctx;
    size_t n = strlen(rel);
    if (rel[n - 1] != 'c') return;
    cr_assert_lt(in->n_impl, MAX_FILES, "more than %d source files", MAX_FILES);
    snprintf(in->impl[in->n_impl++], sizeof in->impl[0], "%.*s", (int)n - 2, rel);
}

static int unit_of(Includes *in, const char *rel) {
    char u[1100];
    size_t n = strlen(rel);
    snprintf(u, sizeof u, "%.*s", n > 2 && rel[n - 2] == '.' ? (int)n - 2 : (int)n, rel);
    size_t m = strlen(u);
    if (m > 9 && strcmp(u + m - 9, "_internal") == 0) u[m - 9] = '\0';
    if (strncmp(u, "include/tapegrad/", 17) == 0) {
        int found = -1, count = 0;
        for (int i = 0; i < in->n_impl; i++) {
            const char *slash = strrchr(in->impl[i], '/');
            if (slash && strcmp(slash + 1, u + 17) == 0) found = i, count++;
        }
        if (count == 1) snprintf(u, sizeof u, "%s", in->impl[found]);
    }
    return file_index(in->c, u);
}

/* The edges of the file `rel` whose text is `text`. */
static void add_includes(Includes *in, const char *rel, const char *text) {
    int from = unit_of(in, rel);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, "#include \"", 10) != 0) continue;
        const char *name = line + 10;
        size_t len = strcspn(name, "\"\n");
        char target[1100];
        snprintf(target, sizeof target, "%s%.*s", strncmp(name, "tapegrad/", 9) == 0 ? "include/" : "", (int)len, name);
        int to = unit_of(in, target);
        if (to != from) in->c->edge[from][to] = true;
    }
}

static void read_includes(const char *rel, void *ctx) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", TAPEGRAD_SOURCE_DIR, rel);
    char *text = read_whole(path);
    add_includes(ctx, rel, text);
    free(text);
}

static Includes *includes_new(void) {
    Includes *in = calloc(1, sizeof *in);
    in->c = calloc(1, sizeof *in->c);
    in->impl = calloc(MAX_FILES, sizeof *in->impl);
    cr_assert(in->c && in->impl);
    return in;
}

static void includes_free(Includes *in) {
    calls_free(in->c);
    free(in->impl);
    free(in);
}

Test(layout, no_two_files_include_each_other) {
    Includes *in = includes_new();
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) walk_sources(rules[i].room, add_impl, in);
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) walk_sources(rules[i].room, read_includes, in);
    walk_sources("include", read_includes, in);
    int edges = 0;
    for (int i = 0; i < in->c->n_files; i++)
        for (int j = 0; j < in->c->n_files; j++) edges += in->c->edge[i][j];
    cr_expect_gt(in->n_impl, 100, "only %d source files found", in->n_impl);
    cr_expect_gt(edges, 500, "only %d includes between files were found", edges);
    cr_expect_eq(count_circles(in->c, true), 0, "files include each other (listed above)");
    includes_free(in);
}

/* The edges of planted files, with lib/tape.c implementing the public tape.h when `tape_c`; its
 * count of circles. */
static int planted_circles(const char *const (*files)[2], size_t n, bool tape_c) {
    Includes *in = includes_new();
    if (tape_c) snprintf(in->impl[in->n_impl++], sizeof in->impl[0], "lib/tape");
    for (size_t i = 0; i < n; i++) add_includes(in, files[i][0], files[i][1]);
    int circles = count_circles(in->c, false);
    includes_free(in);
    return circles;
}

Test(layout, the_include_circle_check_finds_circles_and_knows_units) {
    static const char *const run[][2] = {
        {"run/run.c", "#include \"run/run.h\"\n#include \"run/run_internal.h\"\n"},
        {"run/run_internal.h", "/* run's own */\n#include <stdio.h>\n#include \"run/run.h\"\n"},
        {"run/run_open.c", "#include \"run/run_internal.h\"\n"},
        {"lib/cpu.c", "#include \"lib/cpu.h\"\n#include \"lib/kernels.h\"\n"},
    };
    cr_expect_eq(planted_circles(run, 4, false), 0, "an _internal header is its unit's own");
    static const char *const cpu[][2] = {
        {"lib/cpu.c", "#include \"lib/cpu.h\"\n#include \"lib/kernels.h\"\n"},
        {"lib/kernels.h", "#include \"lib/cpu.h\"\n"},
    };
    cr_expect_eq(planted_circles(cpu, 2, false), 1, "cpu.c -> kernels.h -> cpu.h is a circle");
    static const char *const tape[][2] = {
        {"lib/tape.c", "#include \"lib/blas.h\"\n"},
        {"lib/blas.h", "#include \"tapegrad/tape.h\"\n"},
    };
    cr_expect_eq(planted_circles(tape, 2, true), 1, "tape.h is lib/tape.c's: tape.c -> blas.h -> tape.h is a circle");
    cr_expect_eq(planted_circles(tape, 2, false), 0, "a public header of no file of the rooms is its own unit");
}

/* ---------------------------------------------------------------- the options stay in their layer */

/* The training options (run/train_options.h) are three concerns and a record of where each value
 * came from: a room below cli/ takes the concern it reads (a TgRunSpec, a TgTrainSchedule, a
 * TgTrainInvocation) or the request that bundles them, const (TgTrainRequest), never the whole
 * set, which only the options layer (run/train_options.c) and cli/ hold. */
/* Calls take(name, ctx) for every function of `code` (comments and literals blanked) that has a
 * parameter of type TgTrainOptions * (const or not). */
static void functions_taking_options(const char *code, void (*take)(const char *name, void *ctx), void *ctx) {
    static const char type[] = "TgTrainOptions";
    for (const char *p = strstr(code, type); p; p = strstr(p + 1, type)) {
        if (p > code && is_name_char(p[-1])) continue;
        const char *q = p + sizeof type - 1;
        while (*q == ' ') q++;
        if (*q != '*') continue;
        for (q++; *q == ' '; q++) {}
        if (!is_name_char(*q)) continue; /* a cast: (TgTrainOptions *) */
        while (is_name_char(*q)) q++;
        while (*q == ' ' || *q == '\n') q++;
        if (*q != ',' && *q != ')') continue; /* a variable or a member, not a parameter */
        int depth = 0;
        const char *open = p;
        for (; open > code; open--) {
            if (*open == ')') depth++;
            if (*open == '(' && depth-- == 0) break;
            if (depth == 0 && (*open == ';' || *open == '{' || *open == '}')) break;
        }
        if (*open != '(') continue;
        const char *end = open;
        while (end > code && end[-1] == ' ') end--;
        const char *start = end;
        while (start > code && is_name_char(start[-1])) start--;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(end - start), start);
        if (name[0]) take(name, ctx);
    }
}

typedef struct {
    int bad;
    const char *path;
} OptionTakers;

static void note_taker(const char *name, void *ctx) {
    OptionTakers *t = ctx;
    fprintf(stderr,
            "%s: %s takes the whole TgTrainOptions; give it the concern it reads (TgRunSpec, TgTrainSchedule, "
            "TgTrainInvocation) or the TgTrainRequest\n",
            t->path, name);
    t->bad++;
}

static void check_takers(const char *rel, void *ctx) {
    if (strncmp(rel, "run/train_options.", 18) == 0) return; /* the options layer */
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", TAPEGRAD_SOURCE_DIR, rel);
    char *code = code_of(path);
    OptionTakers *t = ctx;
    t->path = rel;
    functions_taking_options(code, note_taker, t);
    free(code);
}

Test(layout, no_function_below_cli_takes_the_whole_options) {
    OptionTakers t = {0};
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(rules[i].room, "cli") != 0) walk_sources(rules[i].room, check_takers, &t);
    cr_expect_eq(t.bad, 0, "%d functions below cli/ take the whole options (listed above)", t.bad);
}

static void count_taker(const char *name, void *ctx) {
    char *names = ctx;
    strcat(strcat(names, name), " ");
}

Test(layout, the_options_check_finds_a_function_taking_them) {
    char code[] = "/* tg_note(const TgTrainOptions *o) in a comment */\n"
                  "static TgStatus open_it(TgRun *run, const TgTrainOptions *o,\n    bool writes) {\n"
                  "    TgTrainOptions *copy = (TgTrainOptions *)o;\n"
                  "    return use(run, (const TgTrainOptions *)copy);\n}\n"
                  "typedef struct { TgTrainOptions *options; } Holder;\n"
                  "void tg_last(TgTrainOptions *o);\n"
                  "void tg_spec(const TgRunSpec *spec, const MyTgTrainOptions *other);\n";
    char names[256] = "";
    functions_taking_options(blank_comments_and_literals(code), count_taker, names);
    cr_expect_str_eq(names, "open_it tg_last ");
}

/* ---------------------------------------------------------------- flags are named in cli/ alone */

/* Below cli/, a message names a setting by its field between backquotes (`n_heads`,
 * support/setting_names.h), never by its flag: the flags are cli/'s words, which it puts in
 * through the option tables (run/train_options.c and run/shared_flags.h, which pair each field
 * with its flag, are the one place below cli/ that names them). */
typedef struct {
    char (*flags)[64];
    int n_flags;
    int bad;
} FlagScan;

static bool is_flag_char(char c) { return islower((unsigned char)c) || isdigit((unsigned char)c) || c == '-'; }

/* Every literal of the exact form "--name" in `code` (comments blanked) into the flags. */
static void collect_flags(const char *rel, void *ctx) {
    FlagScan *f = ctx;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", TAPEGRAD_SOURCE_DIR, rel);
    char *code = blank_code_text(read_whole(path), true);
    for (const char *p = strstr(code, "\"--"); p; p = strstr(p + 1, "\"--")) {
        size_t n = 2;
        while (is_flag_char(p[1 + n])) n++;
        if (p[1 + n] != '"' || n < 3 || n >= sizeof f->flags[0]) continue;
        bool known = false;
        for (int i = 0; i < f->n_flags && !known; i++) known = strlen(f->flags[i]) == n && !strncmp(f->flags[i], p + 1, n);
        if (known) continue;
        cr_assert_lt(f->n_flags, 512);
        snprintf(f->flags[f->n_flags++], sizeof f->flags[0], "%.*s", (int)n, p + 1);
    }
    free(code);
}

/* How many flag names the string literals of `code` hold (each printed, with `rel`, when report). */
static int flags_named(const FlagScan *f, const char *rel, const char *code, bool report) {
    int found = 0;
    bool in_literal = false;
    for (const char *p = code; *p; p++) {
        if (*p == '"' && (p == code || p[-1] != '\\' || (p > code + 1 && p[-2] == '\\'))) in_literal = !in_literal;
        if (*p == '\n') in_literal = false;
        if (!in_literal || strncmp(p, "--", 2) != 0 || is_flag_char(p[-1])) continue;
        size_t n = 2;
        while (is_flag_char(p[n])) n++;
        for (int i = 0; i < f->n_flags; i++)
            if (strlen(f->flags[i]) == n && strncmp(f->flags[i], p, n) == 0) {
                if (report) fprintf(stderr, "%s: a string names the flag %s; name the setting's field (`...`)\n", rel, f->flags[i]);
                found++;
                break;
            }
        p += n - 1;
    }
    return found;
}

static void check_flag_names(const char *rel, void *ctx) {
    FlagScan *f = ctx;
    if (!strcmp(rel, "run/train_options.c") || !strcmp(rel, "run/shared_flags.h")) return; /* the tables */
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", TAPEGRAD_SOURCE_DIR, rel);
    char *code = blank_code_text(read_whole(path), true);
    f->bad += flags_named(f, rel, code, true);
    free(code);
}

static FlagScan *flag_scan_new(void) {
    FlagScan *f = calloc(1, sizeof *f);
    f->flags = calloc(512, sizeof *f->flags);
    cr_assert(f && f->flags);
    walk_sources("cli", collect_flags, f);
    collect_flags("run/train_options.c", f);
    collect_flags("run/shared_flags.h", f);
    return f;
}

Test(layout, no_string_below_cli_names_a_flag) {
    FlagScan *f = flag_scan_new();
    cr_expect_gt(f->n_flags, 60, "only %d flags found in the option tables", f->n_flags);
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(rules[i].room, "cli") != 0) walk_sources(rules[i].room, check_flag_names, f);
    cr_expect_eq(f->bad, 0, "%d flag names in strings below cli/ (listed above)", f->bad);
    free(f->flags), free(f);
}

Test(layout, the_flag_check_finds_a_flag_in_a_message) {
    FlagScan *f = flag_scan_new();
    char code[] = "/* --heads in a comment */\n"
                  "return tg_fail(TG_ERR_ARG, \"--heads %lld does not divide `dim`\", h); // --dim\n"
                  "x = \"a -- b, --no-such-flag, --batch\\\"q\\\" ---\";\n"
                  "y = \"`n_heads` alone\";\n";
    cr_expect_eq(flags_named(f, "model/x.c", blank_code_text(code, true), false), 2, "--heads and --batch");
    free(f->flags), free(f);
}
