/* The shared library exports exactly the public API: `nm -D --defined-only libtapegrad.so` lists
 * one symbol per function the public headers declare (found by compiling the umbrella header
 * with gcc -aux-info), no other and none missing. The headers compile alone, from include/ with no
 * other include path, as `cmake --install` installs them (so a public header that includes an
 * internal one fails here), and the umbrella tapegrad.h includes every one of them. Every name
 * they declare carries the prefix: functions tg_, types Tg, macros and enum values TG_. The
 * library's SONAME carries the major version. */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptutil.h"
#include "datagen.h"
#include "tapegrad/version.h"
#include "testutil.h"

#if !defined(TAPEGRAD_SHARED_LIB) || !defined(TAPEGRAD_PUBLIC_INCLUDE) || !defined(TAPEGRAD_PUBLIC_HEADERS) || \
    !defined(TAPEGRAD_C_COMPILER)
#error "CMake passes the shared library, the public headers' folder, their list and the compiler"
#endif

enum { MAX_NAMES = 1024, NAME_CAP = 128 };

typedef struct {
    char names[MAX_NAMES][NAME_CAP];
    int count;
} NameSet;

static void name_add(NameSet *set, const char *name) {
    for (int i = 0; i < set->count; i++)
        if (strcmp(set->names[i], name) == 0) return;
    cr_assert_lt(set->count, MAX_NAMES, "more than %d names", MAX_NAMES);
    snprintf(set->names[set->count++], NAME_CAP, "%s", name);
}

static bool name_has(const NameSet *set, const char *name) {
    for (int i = 0; i < set->count; i++)
        if (strcmp(set->names[i], name) == 0) return true;
    return false;
}

/* The functions declared in the public headers (their non-static prototypes in gcc's aux-info of
 * a file including the umbrella alone); *per_header[i] counts those of header i of the list. */
static void declared_functions(const char *dir, NameSet *declared, char headers[][NAME_CAP], int n_headers,
                               int *per_header) {
    datagen_write(dir, "all.c", "#include <tapegrad/tapegrad.h>\n", 31);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s -std=c11 -fsyntax-only -aux-info %s/all.aux -I%s %s/all.c",
             TAPEGRAD_C_COMPILER, dir, TAPEGRAD_PUBLIC_INCLUDE, dir);
    cr_assert_eq(test_run(cmd), 0, "the public headers do not compile on their own: %s", cmd);
    char path[4200], line[2048];
    snprintf(path, sizeof path, "%s/all.aux", dir);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no aux-info from %s", cmd);
    const char *root = TAPEGRAD_PUBLIC_INCLUDE "/tapegrad/";
    while (fgets(line, sizeof line, f)) {
        /* "/ * FILE:LINE:NC * / extern TYPE NAME (ARGS);" */
        const char *file = line + 3;
        if (strncmp(file, root, strlen(root)) != 0) continue;
        const char *decl = strstr(line, "*/ ");
        cr_assert_not_null(decl, "odd aux-info line: %s", line);
        decl += 3;
        bool is_static = strncmp(decl, "static ", 7) == 0; /* static inline: not a symbol, but a name */
        const char *paren = strstr(decl, " (");
        cr_assert_not_null(paren, "odd aux-info line: %s", line);
        const char *start = paren;
        while (start > decl && (start[-1] == '_' || (start[-1] >= '0' && start[-1] <= '9') ||
                                ((start[-1] | 32) >= 'a' && (start[-1] | 32) <= 'z')))
            start--;
        char name[NAME_CAP];
        snprintf(name, sizeof name, "%.*s", (int)(paren - start), start);
        cr_expect(strncmp(name, "tg_", 3) == 0, "%s declares the function %s, without the prefix tg_", file, name);
        if (is_static) continue;
        name_add(declared, name);
        for (int h = 0; h < n_headers; h++) {
            size_t len = strlen(headers[h]);
            if (strncmp(file + strlen(root), headers[h], len) == 0 && file[strlen(root) + len] == ':') per_header[h]++;
        }
    }
    fclose(f);
}

/* The defined dynamic symbols of the shared library. */
static void exported_symbols(NameSet *exported) {
    FILE *p = popen("nm -D --defined-only " TAPEGRAD_SHARED_LIB, "r");
    cr_assert_not_null(p);
    char line[1024], type[8], name[NAME_CAP];
    while (fgets(line, sizeof line, p)) {
        unsigned long long address;
        if (sscanf(line, "%llx %7s %127s", &address, type, name) != 3) continue;
        name_add(exported, name);
    }
    cr_assert_eq(pclose(p), 0, "nm -D failed on %s", TAPEGRAD_SHARED_LIB);
}

Test(exports, the_shared_library_exports_exactly_the_public_functions) {
    char headers[64][NAME_CAP];
    int n_headers = 0;
    char list[] = TAPEGRAD_PUBLIC_HEADERS;
    for (char *h = strtok(list, " ;"); h; h = strtok(NULL, " ;")) snprintf(headers[n_headers++], NAME_CAP, "%s", h);
    cr_assert_gt(n_headers, 10, "only %d public headers listed", n_headers);
    char *dir = datagen_tempdir();
    static NameSet declared, exported;
    int per_header[64] = {0};
    declared_functions(dir, &declared, headers, n_headers, per_header);
    datagen_remove_tree(dir);
    free(dir);
    for (int h = 0; h < n_headers; h++)
        cr_expect_gt(per_header[h], 0, "tapegrad.h does not bring in %s (or it declares no function)", headers[h]);
    exported_symbols(&exported);
    int missing = 0, extra = 0;
    for (int i = 0; i < declared.count; i++)
        if (!name_has(&exported, declared.names[i])) {
            fprintf(stderr, "declared in a public header but not exported: %s\n", declared.names[i]);
            missing++;
        }
    for (int i = 0; i < exported.count; i++)
        if (!name_has(&declared, exported.names[i])) {
            fprintf(stderr, "exported but in no public header: %s\n", exported.names[i]);
            extra++;
        }
    cr_expect_eq(missing, 0, "%d public functions are not exported (listed above)", missing);
    cr_expect_eq(extra, 0, "%d symbols are exported beyond the public API (listed above)", extra);
    cr_expect_eq(exported.count, declared.count, "%d symbols exported, %d functions declared", exported.count,
                 declared.count);
    cr_expect_gt(declared.count, 100, "only %d public functions found: is the aux-info parsed?", declared.count);
}

/* Whether the file holds the bytes of `needle` (strings(1) without its minimum length). */
static bool file_contains(const char *path, const char *needle) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot read %s", path);
    size_t n = strlen(needle), matched = 0;
    bool found = false;
    for (int c; !found && (c = fgetc(f)) != EOF;) {
        if ((char)c == needle[matched]) found = ++matched == n;
        else matched = (char)c == needle[0];
    }
    fclose(f);
    return found;
}

/* The faults tests inject (support/fault.h) live in the test variant alone: neither the installed
 * library nor the installed program reads them from the environment. The variant itself must,
 * or the check above would pass for a wrong reason. */
Test(exports, the_installed_library_and_program_carry_no_fault_injection) {
    const char *faults[] = {"TAPEGRAD_FAIL_WRITE", "TAPEGRAD_FAIL_REPLICA"};
    for (int i = 0; i < 2; i++) {
        cr_expect(!file_contains(TAPEGRAD_SHARED_LIB, faults[i]), "%s reads %s", TAPEGRAD_SHARED_LIB, faults[i]);
        cr_expect(!file_contains(TAPEGRAD_BIN, faults[i]), "%s reads %s", TAPEGRAD_BIN, faults[i]);
        cr_expect(file_contains(TAPEGRAD_FAULT_BIN, faults[i]), "the test variant %s does not read %s",
                  TAPEGRAD_FAULT_BIN, faults[i]);
    }
}

/* ---- the names of types, macros and enum values in the public headers ---- */

/* The header's text with comments and string literals blanked out. */
static char *code_of(const char *text) {
    size_t n = strlen(text);
    char *code = strdup(text);
    for (size_t i = 0; i < n; i++) {
        if (code[i] == '/' && code[i + 1] == '*') {
            for (; i + 1 < n && !(code[i] == '*' && code[i + 1] == '/'); i++)
                if (code[i] != '\n') code[i] = ' ';
            code[i] = ' ';
            if (i + 1 < n) code[++i] = ' ';
        } else if (code[i] == '/' && code[i + 1] == '/') {
            for (; i < n && code[i] != '\n'; i++) code[i] = ' ';
        } else if (code[i] == '"') {
            for (i++; i < n && code[i] != '"' && code[i] != '\n'; i++) {
                if (code[i] == '\\') code[i++] = ' ';
                code[i] = ' ';
            }
        }
    }
    return code;
}

static bool name_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Copies the identifier at p into out (empty when p does not start one); returns its end. */
static const char *identifier(const char *p, char *out, size_t cap) {
    size_t k = 0;
    if (!isalpha((unsigned char)*p) && *p != '_') {
        out[0] = '\0';
        return p;
    }
    while (name_char(*p)) {
        if (k + 1 < cap) out[k++] = *p;
        p++;
    }
    out[k] = '\0';
    return p;
}

static const char *skip_space(const char *p) {
    while (isspace((unsigned char)*p) || *p == '\\') p++;
    return p;
}

static int misnamed(const char *where, const char *what, const char *name, const char *prefix) {
    if (strncmp(name, prefix, strlen(prefix)) == 0) return 0;
    fprintf(stderr, "%s: the %s %s does not start with %s\n", where, what, name, prefix);
    return 1;
}

/* Counts (and prints) the names of `text` that lack their prefix: macros TG_ (or tg_ for a
 * function-like macro standing for a function, as tg_malloc), struct/enum/union tags and typedef
 * names Tg, enum values TG_. */
static int check_header_names(const char *where, const char *text) {
    char *code = code_of(text);
    int bad = 0;
    char name[NAME_CAP];
    for (const char *p = code; *p; p++) {
        if (p > code && name_char(p[-1])) continue;
        if (*p == '#') {
            const char *q = skip_space(p + 1);
            if (strncmp(q, "define", 6) == 0 && isspace((unsigned char)q[6])) {
                const char *end = identifier(skip_space(q + 6), name, sizeof name);
                bool function_like = *end == '(';
                if (!(function_like && strncmp(name, "tg_", 3) == 0)) bad += misnamed(where, "macro", name, "TG_");
            }
            continue;
        }
        const char *q = identifier(p, name, sizeof name);
        if (!name[0]) continue;
        bool is_enum = !strcmp(name, "enum");
        if (is_enum || !strcmp(name, "struct") || !strcmp(name, "union")) {
            const char *r = identifier(skip_space(q), name, sizeof name);
            if (name[0]) bad += misnamed(where, "tag", name, "Tg");
            r = skip_space(r);
            if (is_enum && *r == '{') {
                /* the values: the first name of each item */
                for (r++; *r && *r != '}';) {
                    r = skip_space(r);
                    if (*r == '#') { /* a directive among the values (an X-macro's helper) */
                        while (*r && *r != '\n') r++;
                        continue;
                    }
                    const char *e = identifier(r, name, sizeof name);
                    if (name[0] && strcmp(name, "X") != 0) bad += misnamed(where, "enum value", name, "TG_");
                    while (*e && *e != ',' && *e != '}') e++;
                    r = *e == ',' ? e + 1 : e;
                }
            }
            p = r > p ? r - 1 : p;
        } else if (!strcmp(name, "typedef")) {
            /* the declared name: the one inside (*NAME) of a function type, else the last before ';' */
            int depth = 0;
            const char *r = q, *last = NULL, *fn = NULL;
            for (; *r && !(*r == ';' && depth == 0); r++) {
                if (*r == '{' || *r == '(') depth++;
                if (*r == '}' || *r == ')') depth--;
                if (*r == '(' && r[1] == '*' && !fn) fn = r + 2;
                if (depth == 0 && (isalpha((unsigned char)*r) || *r == '_') && !name_char(r[-1])) last = r;
            }
            identifier(fn ? skip_space(fn) : last ? last : r, name, sizeof name);
            if (name[0]) bad += misnamed(where, "type", name, "Tg");
        }
    }
    free(code);
    return bad;
}

Test(exports, every_name_the_public_headers_declare_carries_the_prefix) {
    char dir_path[4096];
    snprintf(dir_path, sizeof dir_path, "%s/tapegrad", TAPEGRAD_PUBLIC_INCLUDE);
    DIR *d = opendir(dir_path);
    cr_assert_not_null(d, "no folder %s", dir_path);
    int bad = 0, headers = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (n < 3 || strcmp(e->d_name + n - 2, ".h") != 0) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
        char *text = ckpt_read_text(path);
        cr_assert_not_null(text, "cannot read %s", path);
        bad += check_header_names(path, text);
        free(text);
        headers++;
    }
    closedir(d);
    cr_expect_gt(headers, 15, "only %d public headers found", headers);
    cr_expect_eq(bad, 0, "%d names of the public headers lack their prefix (listed above)", bad);

    static NameSet exported;
    exported_symbols(&exported);
    for (int i = 0; i < exported.count; i++)
        cr_expect(strncmp(exported.names[i], "tg_", 3) == 0, "libtapegrad.so exports %s, without the prefix tg_",
                  exported.names[i]);
}

/* The scan above finds every kind of name it checks, and ignores comments, strings and members. */
Test(exports, the_prefix_check_finds_unprefixed_names) {
    const char *header = "/* typedef struct Comment Comment; #define NOT_A_MACRO */\n"
                         "#define TG_FINE 1\n#define tg_fine(x) (x)\n#define BAD_MACRO 2\n#define bad_fn(x) (x)\n"
                         "typedef struct TgFine { int member; struct TgFine *next; } TgFine;\n"
                         "typedef struct Bad Bad;\n"
                         "typedef enum { TG_A = 1, B_VALUE, TG_C } TgEnum;\n"
                         "enum { TG_LIMIT = 4,\n#define TG_ROW(id, name) TG_##id,\n LIMIT2 = 5 };\n"
                         "typedef void (*bad_fn_t)(int x, const char *s);\n"
                         "typedef int TgCount;\n"
                         "const char *s = \"typedef int Hidden;\";\n";
    /* BAD_MACRO, bad_fn, Bad (tag and type), B_VALUE, LIMIT2, bad_fn_t */
    cr_expect_eq(check_header_names("test.h", header), 7);
}

/* A program using the public headers' table macros compiles without a warning, with -Wall -Wextra
 * -pedantic -Werror, under the build's compiler and under clang (which scripts/test.sh installs: it
 * warns of things gcc does not, such as adding an int to a string literal). */
Test(exports, the_public_macros_compile_without_warnings) {
    char *dir = datagen_tempdir();
    const char *program = "#include <tapegrad/tapegrad.h>\n#include <stdio.h>\n"
                          "static const char *const choices[] = {TG_PRESET_CHOICES, TG_FFN_CHOICES};\n"
                          "int main(void) {\n"
                          "    TgModelConfig c;\n"
                          "    if (tg_model_preset(tg_model_preset_name(TG_PRESET_SMALL), &c) != TG_OK) return 1;\n"
                          "    TgTensor *t = NULL; (void)t;\n"
                          "    return printf(\"%s %s %d\\n\", choices[0], choices[1], (int)TG_SHAPE(2, 3)[1]) < 0;\n"
                          "}\n";
    datagen_write(dir, "uses.c", program, strlen(program));
    const char *compilers[] = {TAPEGRAD_C_COMPILER, "clang"};
    for (int i = 0; i < 2; i++) {
        char cmd[8192];
        if (i == 1)
            cr_assert_eq(test_run("command -v clang >/dev/null 2>&1"), 0,
                         "clang is missing (apt-get install clang; scripts/test.sh installs it)");
        snprintf(cmd, sizeof cmd, "%s -std=c11 -Wall -Wextra -pedantic -Werror -fsyntax-only -I%s %s/uses.c", compilers[i],
                 TAPEGRAD_PUBLIC_INCLUDE, dir);
        cr_expect_eq(test_run(cmd), 0, "the public macros do not compile cleanly: %s", cmd);
    }
    datagen_remove_tree(dir);
    free(dir);
}

Test(exports, the_soname_carries_the_major_version) {
    FILE *p = popen("readelf -d " TAPEGRAD_SHARED_LIB, "r");
    cr_assert_not_null(p);
    char line[1024], expected[64];
    snprintf(expected, sizeof expected, "[libtapegrad.so.%d]", TG_VERSION_MAJOR);
    bool found = false;
    while (fgets(line, sizeof line, p)) found |= strstr(line, "SONAME") && strstr(line, expected);
    pclose(p);
    cr_expect(found, "no SONAME %s in %s", expected, TAPEGRAD_SHARED_LIB);
}
