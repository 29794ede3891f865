/* The one options schema (support/options.h): flags and values, ranges from any source, files of
 * saved options read back (in the current and the older "key value" form), and the training
 * options' table: validation once, identity and saved groups. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ckptutil.h"
#include "datagen.h"
#include "support/options.h"
#include "testutil.h"
#include "cli/cli.h"
#include "cli/flags.h"
#include "run/run.h"
#include "run/train_options.h"
#include "support/setting_names.h"
#include "tapegrad/model.h"

typedef struct {
    int64_t steps;
    int threads;
    double lr, fraction;
    const char *name;
    bool verbose;
} Toy;

enum { SAVED = 1 };
static const TgOptSpec toy_specs[] = {
    TG_OPT(Toy, steps, "--steps", TG_OPT_INT64, "steps", TG_OPT_POSITIVE, NULL, SAVED, NULL),
    TG_OPT(Toy, threads, "--threads", TG_OPT_INT, "threads", TG_OPT_BETWEEN(1, 256), NULL, SAVED, NULL),
    TG_OPT(Toy, lr, "--lr", TG_OPT_DOUBLE, "learning rate", TG_OPT_POSITIVE, NULL, SAVED, NULL),
    TG_OPT(Toy, fraction, "--fraction", TG_OPT_DOUBLE, "a share", TG_OPT_FRACTION, NULL, 0, NULL),
    TG_OPT(Toy, name, "--name", TG_OPT_STRING, "a name", TG_OPT_ANY, "alpha|beta", SAVED, NULL),
    TG_OPT(Toy, verbose, "--verbose", TG_OPT_BOOL, "talk", TG_OPT_ANY, NULL, 0, NULL),
};
static const TgOptTable toy = {"toy", NULL, toy_specs, 6, 1};

static TgStatus parse(Toy *t, TgOptSet *given, const char *const *args, int n) {
    char *argv[16] = {"toy"};
    for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
    const char *positional[1];
    int n_positional = 0;
    bool help;
    return cli_flags_parse(&toy, t, given, n + 1, argv, positional, &n_positional, &help);
}

Test(options, parse_sets_fields_and_given_bits) {
    Toy t = {.steps = 10, .threads = 2, .lr = 1e-3, .fraction = 0.5};
    TgOptSet given;
    assert_ok(parse(&t, &given, (const char *[]){"--steps", "40", "--lr=3e-3", "--name", "beta", "--verbose"}, 6));
    cr_expect_eq(t.steps, 40);
    cr_expect_eq(t.lr, 3e-3);
    cr_expect_str_eq(t.name, "beta");
    cr_expect(t.verbose);
    cr_expect_eq(t.threads, 2, "not given: unchanged");
    cr_expect_eq(given, TG_OPT_BIT(0) | TG_OPT_BIT(2) | TG_OPT_BIT(4) | TG_OPT_BIT(5));
}

Test(options, bad_values_name_the_flag_and_what_it_takes) {
    Toy t = {0};
    assert_fails(parse(&t, NULL, (const char *[]){"--steps", "0"}, 2), TG_ERR_ARG, "--steps must be positive, got 0");
    assert_fails(parse(&t, NULL, (const char *[]){"--steps", "12x"}, 2), TG_ERR_ARG, "--steps expects an integer");
    assert_fails(parse(&t, NULL, (const char *[]){"--steps", "99999999999999999999"}, 2), TG_ERR_ARG,
                 "--steps must be at most 9223372036854775807, got 99999999999999999999");
    assert_fails(parse(&t, NULL, (const char *[]){"--steps", " 30"}, 2), TG_ERR_ARG,
                 "--steps expects an integer, got ' 30'");
    assert_fails(parse(&t, NULL, (const char *[]){"--threads", "99999999999"}, 2), TG_ERR_ARG,
                 "--threads must be in [1, 256], got 99999999999");
    assert_fails(parse(&t, NULL, (const char *[]){"--threads", "300"}, 2), TG_ERR_ARG, "--threads must be in [1, 256]");
    assert_fails(parse(&t, NULL, (const char *[]){"--lr", "nan"}, 2), TG_ERR_ARG, "--lr expects a finite number");
    assert_fails(parse(&t, NULL, (const char *[]){"--lr", "fast"}, 2), TG_ERR_ARG, "--lr expects a number, got 'fast'");
    assert_fails(parse(&t, NULL, (const char *[]){"--lr", "1e400"}, 2), TG_ERR_ARG,
                 "--lr 1e400 is beyond the largest double, 1.7976931348623157e+308");
    /* finite but subnormal: refused with the smallest normal double, and no "give 0" where 0 is refused */
    assert_fails(parse(&t, NULL, (const char *[]){"--lr", "1e-320"}, 2), TG_ERR_ARG,
                 "--lr 1e-320 is below 2.2250738585072014e-308, the smallest normal double");
    cr_expect(strstr(tg_error_message(), "so give a value of at least that"), "%s", tg_error_message());
    assert_fails(parse(&t, NULL, (const char *[]){"--lr", "1e-400"}, 2), TG_ERR_ARG, "the smallest normal double");
    assert_ok(parse(&t, NULL, (const char *[]){"--lr", "2.3e-308"}, 2));
    assert_fails(parse(&t, NULL, (const char *[]){"--fraction", "1"}, 2), TG_ERR_ARG, "must be in (0, 1)");
    assert_fails(parse(&t, NULL, (const char *[]){"--name", "gamma"}, 2), TG_ERR_ARG, "one of alpha|beta");
    assert_fails(parse(&t, NULL, (const char *[]){"--nope"}, 1), TG_ERR_ARG, "unknown flag '--nope'");
    assert_fails(parse(&t, NULL, (const char *[]){"--stesp", "3"}, 2), TG_ERR_ARG,
                 "unknown flag '--stesp' (did you mean --steps?)");
    assert_fails(parse(&t, NULL, (const char *[]){"--steps"}, 1), TG_ERR_ARG, "--steps needs a value");
    assert_fails(parse(&t, NULL, (const char *[]){"--verbose=1"}, 1), TG_ERR_ARG, "takes no value");
    assert_fails(parse(&t, NULL, (const char *[]){"a", "b"}, 2), TG_ERR_ARG, "unexpected argument 'b'");
}

Test(options, saved_file_round_trips_and_is_range_checked) {
    char *dir = datagen_tempdir(), *path = datagen_path(dir, "opts.txt");
    Toy t = {.steps = 77, .threads = 3, .lr = 0.125, .fraction = 0.25, .name = "alpha"};
    assert_ok(tg_opt_write(&toy, &t, SAVED, path));
    Toy back = {.steps = 1, .threads = 1, .lr = 1, .fraction = 0.9};
    TgOptStrings strings = {0};
    TgOptFileRead from;
    /* --threads was given on the command line: the file does not override it */
    assert_ok(tg_opt_read(&toy, &back, SAVED, TG_OPT_BIT(1), path, &from, &strings));
    cr_expect_eq(back.steps, 77);
    cr_expect_eq(back.lr, 0.125);
    cr_expect_str_eq(back.name, "alpha");
    cr_expect_eq(back.threads, 1);
    cr_expect_eq(back.fraction, 0.9, "not in the saved group");
    cr_expect_eq(from.read, TG_OPT_BIT(0) | TG_OPT_BIT(2) | TG_OPT_BIT(4));
    cr_expect_eq(from.line[0], 1);
    cr_expect_eq(from.line[1], 2, "kept, but in the file");
    /* a value written by hand is checked as a flag would be, with the file and line named */
    datagen_write(dir, "opts.txt", "--steps 5\n--lr -1\n", 18);
    assert_fails(tg_opt_read(&toy, &back, SAVED, 0, path, NULL, &strings), TG_ERR_FORMAT,
                 "opts.txt line 2: --lr must be positive");
    /* the older "key value" form */
    datagen_write(dir, "opts.txt", "steps 9\nname beta\n", 18);
    assert_ok(tg_opt_read(&toy, &back, SAVED, 0, path, NULL, &strings));
    cr_expect_eq(back.steps, 9);
    cr_expect_str_eq(back.name, "beta");
    datagen_write(dir, "opts.txt", "garbage\n", 8);
    assert_fails(tg_opt_read(&toy, &back, SAVED, 0, path, NULL, &strings), TG_ERR_FORMAT, "expected \"--flag value\"");
    tg_opt_strings_free(&strings);
    datagen_remove_tree(dir);
    free(path);
    free(dir);
}

/* Enums by name and a value with a codec (the tokenizer's choice): parsed from flags and files
 * alike, written back as the same text, compared by value. */
typedef enum { COLOUR_RED, COLOUR_GREEN, COLOUR_BLUE } Colour;
typedef struct {
    Colour colour;
    TgTokenizerChoice tokenizer;
} Typed;
static const TgOptSpec typed_specs[] = {
    TG_OPT(Typed, colour, "--colour", TG_OPT_ENUM, "a colour", TG_OPT_ANY, "red|green|blue", SAVED, NULL),
    TG_FLAG_TOKENIZER(Typed, tokenizer, "a tokenizer", SAVED, NULL),
};
static const TgOptTable typed = {"typed", NULL, typed_specs, 2, 0};

Test(options, enums_and_values_are_parsed_saved_and_compared_as_text) {
    _Static_assert(sizeof(Colour) == sizeof(int), "an enum option is stored as an int");
    Typed t = {0}, u = {0};
    assert_ok(tg_opt_parse_value(&typed_specs[0], &t, "blue"));
    cr_expect_eq(t.colour, COLOUR_BLUE);
    assert_ok(tg_opt_parse_value(&typed_specs[0], &t, "red"));
    cr_expect_eq(t.colour, COLOUR_RED, "the first name is value 0");
    assert_fails(tg_opt_parse_value(&typed_specs[0], &t, "bluish"), TG_ERR_ARG, "--colour must be one of red|green|blue, got 'bluish'");
    assert_fails(tg_opt_parse_value(&typed_specs[0], &t, "red|green"), TG_ERR_ARG, "must be one of");
    cr_expect_eq(t.colour, COLOUR_RED, "a refused name leaves the value");
    t.colour = (Colour)7;
    assert_fails(tg_opt_check(&typed, &t, TG_OPT_BIT(0)), TG_ERR_ARG, "--colour must be one of red|green|blue, got value 7");
    assert_ok(tg_opt_parse_value(&typed_specs[0], &t, "green"));

    assert_ok(tg_opt_parse_value(&typed_specs[1], &t, "hf:/data/tok.json"));
    cr_expect_eq(t.tokenizer.source, TG_TOKENIZER_USE_HF);
    cr_expect_str_eq(t.tokenizer.hf_file, "/data/tok.json");
    assert_fails(tg_opt_parse_value(&typed_specs[1], &u, "hf:"), TG_ERR_ARG, "--tokenizer must be char, bpe or hf:PATH");
    assert_fails(tg_opt_parse_value(&typed_specs[1], &u, "sentencepiece"), TG_ERR_ARG, "got 'sentencepiece'");
    char text[64];
    tg_opt_format(&typed, 1, &t, text, sizeof text);
    cr_expect_str_eq(text, "hf:/data/tok.json");
    tg_opt_format(&typed, 0, &t, text, sizeof text);
    cr_expect_str_eq(text, "green");

    char *dir = datagen_tempdir(), *path = datagen_path(dir, "typed.txt");
    assert_ok(tg_opt_write(&typed, &t, SAVED, path));
    char *written = ckpt_read_text(path);
    cr_expect_str_eq(written, "--colour green\n--tokenizer hf:/data/tok.json\n");
    free(written);
    /* an unset value is not written */
    assert_ok(tg_opt_write(&typed, &u, SAVED, path));
    written = ckpt_read_text(path);
    cr_expect_str_eq(written, "--colour red\n");
    free(written);
    assert_ok(tg_opt_write(&typed, &t, SAVED, path));
    TgOptStrings strings = {0};
    assert_ok(tg_opt_read(&typed, &u, SAVED, 0, path, NULL, &strings));
    cr_expect(tg_opt_equal(&typed, 0, &t, &u) && tg_opt_equal(&typed, 1, &t, &u), "read back as written");
    u.tokenizer.hf_file = "/data/other.json";
    cr_expect_not(tg_opt_equal(&typed, 1, &t, &u), "another file is another tokenizer");
    datagen_write(dir, "typed.txt", "--colour mauve\n", 15);
    assert_fails(tg_opt_read(&typed, &u, SAVED, 0, path, NULL, &strings), TG_ERR_FORMAT, "typed.txt line 1: --colour must be one of");
    tg_opt_strings_free(&strings);
    datagen_remove_tree(dir);
    free(path), free(dir);
}

/* A repeatable flag (TG_OPT_LIST): each time given, one more value; the command line's values
 * replace the default list, a file's lines replace the list held, one value a line. */
typedef struct {
    TgOptList files;
    int64_t steps;
} Listed;
static const TgOptSpec listed_specs[] = {
    TG_OPT(Listed, files, "--file", TG_OPT_LIST, "a file", TG_OPT_ANY, NULL, SAVED, NULL),
    TG_OPT(Listed, steps, "--steps", TG_OPT_INT64, "steps", TG_OPT_POSITIVE, NULL, SAVED, NULL),
};
static const TgOptTable listed = {"listed", NULL, listed_specs, 2, 0};

static TgStatus parse_listed(Listed *l, TgOptSet *given, const char *const *args, int n) {
    char *argv[2 * TG_OPT_LIST_MAX + 8] = {"listed"};
    for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
    bool help;
    return cli_flags_parse(&listed, l, given, n + 1, argv, NULL, NULL, &help);
}

Test(options, a_repeatable_flag_collects_its_values_in_flags_and_files) {
    Listed l = {.files = {{"default.txt"}, 1}, .steps = 1};
    TgOptSet given;
    assert_ok(parse_listed(&l, &given, (const char *[]){"--file", "a.jsonl", "--steps", "3", "--file=b c.jsonl"}, 5));
    cr_expect_eq(l.files.count, 2, "the default is replaced, then the values add up");
    cr_expect_str_eq(l.files.items[0], "a.jsonl");
    cr_expect_str_eq(l.files.items[1], "b c.jsonl");
    cr_expect_eq(given, TG_OPT_BIT(0) | TG_OPT_BIT(1));
    char text[128];
    tg_opt_format(&listed, 0, &l, text, sizeof text);
    cr_expect_str_eq(text, "a.jsonl, b c.jsonl");
    /* one value past the most is refused */
    const char *many[2 * (TG_OPT_LIST_MAX + 1)];
    for (int i = 0; i <= TG_OPT_LIST_MAX; i++) many[2 * i] = "--file", many[2 * i + 1] = "x";
    Listed full = {0};
    assert_fails(parse_listed(&full, NULL, many, 2 * (TG_OPT_LIST_MAX + 1)), TG_ERR_ARG,
                 "--file is given more than 16 times");
    cr_expect_eq(full.files.count, TG_OPT_LIST_MAX);

    /* a line a value; read back equal, in order */
    char *dir = datagen_tempdir(), *path = datagen_path(dir, "listed.txt");
    assert_ok(tg_opt_write(&listed, &l, SAVED, path));
    char *written = ckpt_read_text(path);
    cr_expect_str_eq(written, "--file a.jsonl\n--file b c.jsonl\n--steps 3\n");
    free(written);
    Listed back = {.files = {{"old.txt", "older.txt"}, 2}, .steps = 1};
    TgOptStrings strings = {0};
    TgOptFileRead from;
    assert_ok(tg_opt_read(&listed, &back, SAVED, 0, path, &from, &strings));
    cr_expect(tg_opt_equal(&listed, 0, &l, &back), "the file's list replaces the one held");
    cr_expect_eq(from.line[0], 1, "the list's first line");
    back.files.items[1] = "c.jsonl";
    cr_expect_not(tg_opt_equal(&listed, 0, &l, &back));
    /* given on the command line: kept, the file's values checked all the same */
    Listed kept = {.files = {{"mine.jsonl"}, 1}};
    assert_ok(tg_opt_read(&listed, &kept, SAVED, TG_OPT_BIT(0), path, NULL, &strings));
    cr_expect_eq(kept.files.count, 1);
    cr_expect_str_eq(kept.files.items[0], "mine.jsonl");
    cr_expect_eq(kept.steps, 3);
    /* no value: no line; an empty list reads back empty */
    Listed none = {.steps = 2};
    assert_ok(tg_opt_write(&listed, &none, SAVED, path));
    written = ckpt_read_text(path);
    cr_expect_str_eq(written, "--steps 2\n");
    free(written);
    /* a value with a line break cannot be one line */
    l.files.items[0] = "a\nb";
    assert_fails(tg_opt_write(&listed, &l, SAVED, path), TG_ERR_ARG, "--file 'a\nb' holds a line break");
    /* too many lines are refused, naming the line */
    char text17[512] = "";
    for (int i = 0; i <= TG_OPT_LIST_MAX; i++) strcat(text17, "--file f\n");
    datagen_write(dir, "listed.txt", text17, strlen(text17));
    assert_fails(tg_opt_read(&listed, &back, SAVED, 0, path, NULL, &strings), TG_ERR_FORMAT,
                 "listed.txt line 17: --file is given more than 16 times");
    tg_opt_strings_free(&strings);
    datagen_remove_tree(dir);
    free(path), free(dir);
}

/* The training table: every flag has help, a range or choices are enforced, and validation sees
 * the options against each other before anything is written. */
Test(options, training_options_are_validated_once_and_together) {
    const TgOptTable *t = tg_train_option_table();
    for (int i = 0; i < t->count; i++) {
        cr_expect(t->specs[i].help && t->specs[i].help[0], "%s has no help", t->specs[i].flag);
        cr_expect_eq(strncmp(t->specs[i].flag, "--", 2), 0);
        for (int j = 0; j < i; j++) cr_expect_str_neq(t->specs[i].flag, t->specs[j].flag);
    }
    TgTrainOptions o;
    tg_train_options_defaults(&o);
    assert_ok(tg_train_options_validate(&o));
    o.invocation.resume = "run", o.invocation.out_dir = "elsewhere";
    assert_fails(tg_train_options_validate(&o), TG_ERR_ARG, "drop --out");
    tg_train_options_defaults(&o);
    o.invocation.stop_after = 2000;
    assert_fails(tg_train_options_validate(&o), TG_ERR_ARG, "--stop-after 2000 is past --steps 1500");
    tg_train_options_defaults(&o);
    o.schedule.steps = -3;
    o.given = TG_OPT_BIT(tg_opt_find(t, "--steps"));
    assert_fails(tg_train_options_validate(&o), TG_ERR_ARG, "--steps must be in [1, 9007199254740992], got -3");
    tg_train_options_defaults(&o);
    o.spec.model.vocab = 200;
    o.given = TG_OPT_BIT(tg_opt_find(t, "--vocab"));
    assert_fails(tg_train_options_validate(&o), TG_ERR_ARG, "--vocab 200 is below 257");
    /* the saved group is what train_options.txt holds; identity options are never in it */
    for (int i = 0; i < t->count; i++)
        cr_expect(!((t->specs[i].group & TG_TRAIN_OPT_SAVED) && (t->specs[i].group & TG_TRAIN_OPT_IDENTITY)), "%s",
                  t->specs[i].flag);
}

/* train_options.txt and run.txt are read strictly: what a flag refuses, a line refuses, and a line
 * that is no option of the file, or one given twice, is refused instead of skipped. */
Test(options, files_refuse_repeats_unknown_keys_other_groups_and_nul_bytes) {
    char *dir = datagen_tempdir(), *path = datagen_path(dir, "opts.txt");
    static const struct {
        const char *text;
        size_t len; /* 0: strlen */
        const char *says;
    } cases[] = {
        {"--steps 30\n--lr 0.1\n--steps 40\n", 0, "opts.txt line 3: --steps again (line 1 set it already)"},
        {"--steps 30\n--stepz 5\n", 0, "opts.txt line 2: unknown option '--stepz' (did you mean --steps?)"},
        {"-threads 3\n", 0, "opts.txt line 1: unknown option '-threads' (did you mean --threads?)"},
        {"--qwertyuiop 3\n", 0, "opts.txt line 1: unknown option '--qwertyuiop'"},
        {"# a comment\n", 0, "unknown option '#'"},
        {"--steps 30\0junk\n", 16, "opts.txt line 1 holds a NUL byte"},
        {"--fraction 0.5\n", 0, "opts.txt line 1: --fraction is not one of the options this file holds"},
        {"--steps\n", 0, "expected \"--flag value\""},
        {" --steps 3\n", 0, "expected \"--flag value\""},
        {"--steps 3 \n", 0, "--steps expects an integer, got '3 '"},
        /* a value the caller keeps (--threads, given on the command line) is still the file's to get right */
        {"--threads 0\n", 0, "opts.txt line 1: --threads must be in [1, 256], got 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
        datagen_write(dir, "opts.txt", cases[i].text, len);
        Toy t = {.steps = 1, .threads = 2, .lr = 1};
        TgOptStrings strings = {0};
        assert_fails(tg_opt_read(&toy, &t, SAVED, TG_OPT_BIT(1), path, NULL, &strings), TG_ERR_FORMAT, cases[i].says);
        cr_expect_eq(t.threads, 2, "a kept value stays, even when the file's is bad");
        tg_opt_strings_free(&strings);
    }
    /* what tg_opt_write cannot store is refused rather than written as two lines */
    Toy t = {.steps = 1, .threads = 2, .lr = 1, .name = "alpha\nbeta"};
    assert_fails(tg_opt_write(&toy, &t, SAVED, path), TG_ERR_ARG, "--name 'alpha\nbeta' holds a line break");
    datagen_remove_tree(dir);
    free(path);
    free(dir);
}

/* A cross-check that fails on values of train_options.txt names the file and the line, and is the
 * file's fault (exit 1) when both values came from it. */
Test(options, conflicting_saved_options_name_the_file_and_line) {
    char *dir = datagen_tempdir();
    datagen_write(dir, "train_options.txt", "--steps 30\n--lr 0.003\n--min-lr 0.5\n", 35);
    datagen_write(dir, "run.txt", "--seed 1\n", 9); /* what makes the folder a run's */
    TgTrainOptions o;
    tg_train_options_defaults(&o);
    o.invocation.resume = dir;
    TgOptStrings strings = {0};
    assert_ok(tg_train_options_restore(dir, &o, NULL, &strings));
    assert_fails(tg_train_options_validate(&o), TG_ERR_FORMAT, "--min-lr 0.5 (");
    cr_expect(strstr(tg_error_message(), "train_options.txt line 3) is above --lr 0.003 (") &&
                  strstr(tg_error_message(), "train_options.txt line 2)"),
              "%s", tg_error_message());
    /* --lr given now: the flag's conflict with the file (exit 2), the file still named */
    tg_train_options_defaults(&o);
    o.invocation.resume = dir;
    o.schedule.lr = 0.1;
    o.given = TG_OPT_BIT(tg_opt_find(tg_train_option_table(), "--lr"));
    datagen_write(dir, "train_options.txt", "--steps 30\n--min-lr 0.5\n", 24);
    assert_ok(tg_train_options_restore(dir, &o, NULL, &strings));
    assert_fails(tg_train_options_validate(&o), TG_ERR_ARG, "train_options.txt line 2) is above --lr 0.1");
    /* the tokenizer of run.txt is checked as the flag is */
    datagen_write(dir, "run.txt", "--preset tiny\n--tokenizer zzz\n--seed 1\n", 40);
    TgRunSpec id;
    assert_fails(tg_run_identity_read(dir, &id, &strings), TG_ERR_FORMAT,
                 "run.txt line 2: --tokenizer must be char, bpe or hf:PATH/tokenizer.json, got 'zzz'");
    datagen_write(dir, "run.txt", "--preset tiny\n--tokenizer hf:\n--seed 1\n", 40);
    assert_fails(tg_run_identity_read(dir, &id, &strings), TG_ERR_FORMAT, "--tokenizer must be char, bpe or hf:PATH");
    tg_opt_strings_free(&strings);
    datagen_remove_tree(dir);
    free(dir);
}

/* Flags of one name in several subcommands are one flag: the same type, range and choices in
 * every table (run/shared_flags.h), so no subcommand accepts what another refuses. Two names have
 * two meanings: --seeds (gradcheck's is a count, compare-ffn's a count or a list, a string whose
 * items compare-ffn checks against --seed's range) and --task (train's is what a run trains on,
 * pretrain or sft; eval's a task file to score, `eval --task FILE.jsonl`). */
static bool same_range(TgOptRange a, TgOptRange b) {
    return a.lo == b.lo && a.hi == b.hi && a.lo_open == b.lo_open && a.hi_open == b.hi_open;
}

Test(options, a_flag_shared_by_subcommands_has_one_range) {
    static const char *const two_meanings[] = {"--seeds", "--task"};
    const TgOptSpec *first[256];
    const char *first_in[256];
    int n_flags = 0, n_tables = 0, shared = 0;
    for (int c = 0; c < cli_subcommand_count; c++) {
        const Subcommand *sub = cli_subcommands[c];
        cr_assert(sub->table, "%s lists no option tables", sub->name);
        for (int k = 0; sub->table(k); k++) {
            const TgOptTable *t = sub->table(k);
            n_tables++;
            for (int i = 0; i < t->count; i++) {
                const TgOptSpec *s = &t->specs[i];
                bool exempt = false;
                for (size_t e = 0; e < sizeof two_meanings / sizeof two_meanings[0]; e++)
                    exempt |= strcmp(s->flag, two_meanings[e]) == 0;
                int j = 0;
                while (j < n_flags && strcmp(first[j]->flag, s->flag) != 0) j++;
                if (j == n_flags) {
                    cr_assert_lt(n_flags, 256);
                    first[n_flags] = s, first_in[n_flags++] = t->command;
                    continue;
                }
                if (exempt) continue;
                shared++;
                const TgOptSpec *f = first[j];
                cr_expect_eq(s->type, f->type, "%s: one type in %s, another in %s", s->flag, first_in[j], t->command);
                cr_expect(same_range(s->range, f->range), "%s: [%g, %g] in %s, [%g, %g] in %s", s->flag, f->range.lo,
                          f->range.hi, first_in[j], s->range.lo, s->range.hi, t->command);
                cr_expect((!s->choices && !f->choices) || (s->choices && f->choices && !strcmp(s->choices, f->choices)),
                          "%s: other choices in %s than in %s", s->flag, t->command, first_in[j]);
                cr_expect(s->check == f->check, "%s: another check in %s than in %s", s->flag, t->command, first_in[j]);
            }
        }
    }
    cr_expect_geq(n_tables, 12, "only %d tables walked", n_tables);
    cr_expect_geq(shared, 20, "only %d flags shared", shared);
}

/* The library's messages name settings by their fields, between backquotes; the program names
 * them by its flags (support/setting_names.h): a C API user reads `n_heads`, a tapegrad user
 * --heads, from the one message. Names the tables do not know, and backquoted text that is no
 * name, stay as they are. */
Test(options, the_library_names_settings_by_fields_and_the_program_by_flags) {
    TgModelConfig c = tg_model_preset_config(TG_PRESET_TINY);
    c.vocab = 256, c.n_heads = 3, c.dim = 64;
    tg_setting_namer_set(NULL);
    cr_assert_eq(tg_model_config_validate(&c), TG_ERR_ARG);
    cr_expect(strstr(tg_error_message(), "`n_heads` 3 does not divide `dim` 64"), "%s", tg_error_message());
    cli_name_settings_by_flags();
    cr_assert_eq(tg_model_config_validate(&c), TG_ERR_ARG);
    cr_expect(strstr(tg_error_message(), "--heads 3 does not divide --dim 64"), "%s", tg_error_message());
    tg_fail(TG_ERR_ARG, "`batch` and `lora_rank`, `no_such_setting`, `two words`, `` and `safetensors`");
    cr_expect_str_eq(tg_error_message(), "--batch and --lora-rank, `no_such_setting`, `two words`, `` and --safetensors");
    char buf[16];
    cr_expect_str_eq(tg_setting_names("lower `batch` or `seq_len` now", buf, sizeof buf), "lower --batch o",
                     "a long message is cut at the buffer's end");
    tg_setting_namer_set(NULL);
}

/* Every setting of every table is named by its own flag, save those whose name train's table
 * holds for another flag (train's comes first: the library's messages are mostly about runs). */
Test(options, every_setting_name_gives_its_flag) {
    int settings = 0;
    for (int c = 0; c < cli_subcommand_count; c++)
        for (int k = 0; cli_subcommands[c]->table(k); k++) {
            const TgOptTable *t = cli_subcommands[c]->table(k);
            for (int i = 0; i < t->count; i++) {
                const TgOptSpec *s = &t->specs[i];
                cr_assert(s->field, "%s %s has no field", t->command, s->flag);
                const char *name = tg_opt_setting(s), *flag = cli_flag_of_setting(name, strlen(name));
                int in_train = tg_opt_find_setting(tg_train_option_table(), name);
                cr_expect(flag && (strcmp(flag, s->flag) == 0 || in_train >= 0),
                          "%s %s (setting %s) is named %s", t->command, s->flag, name, flag ? flag : "(nothing)");
                settings++;
            }
        }
    cr_expect_gt(settings, 150, "only %d settings walked", settings);
}

/* ---------------------------------------------------------------- enums named from one list */

/* Every enum the options carry (and the GGUF weight types and LoRA targets beside them) takes its
 * choices, names and parse from its one X-macro list (tapegrad/error.h): the choices split on '|'
 * parse to 0, 1, ... in order and name themselves back; other text is refused naming the choices;
 * a value past the list is named "?". */
#define EXPECT_ENUM_FROM_ONE_LIST(Type, fn, choices, count)                                                            \
    do {                                                                                                               \
        char list[256];                                                                                                \
        snprintf(list, sizeof list, "%s", choices);                                                                    \
        int n = 0;                                                                                                     \
        for (char *save, *name = strtok_r(list, "|", &save); name; name = strtok_r(NULL, "|", &save), n++) {           \
            Type value = (Type)(count);                                                                                \
            cr_expect_eq(fn##_parse(name, &value), TG_OK, "%s: %s", #fn, tg_error_message());                          \
            cr_expect_eq((int)value, n, "%s: '%s' parses to %d", #fn, name, (int)value);                               \
            cr_expect_str_eq(fn##_name(value), name);                                                                  \
        }                                                                                                              \
        cr_expect_eq(n, (int)(count), "%s: %d choices for %d values", #fn, n, (int)(count));                           \
        Type unused;                                                                                                   \
        cr_expect_eq(fn##_parse("bogus", &unused), TG_ERR_ARG);                                                        \
        char said[300];                                                                                                \
        snprintf(said, sizeof said, "'bogus'; the choices are %s", choices);                                           \
        cr_expect(strstr(tg_error_message(), said), "%s: %s", #fn, tg_error_message());                                \
        cr_expect_eq(fn##_parse(NULL, &unused), TG_ERR_ARG);                                                           \
        cr_expect_str_eq(fn##_name((Type)(count)), "?");                                                               \
    } while (0)

Test(options, every_enum_takes_its_names_parse_and_choices_from_one_list) {
    EXPECT_ENUM_FROM_ONE_LIST(TgTrainTask, tg_train_task, TG_TRAIN_TASK_CHOICES, TG_TASK_COUNT);
    EXPECT_ENUM_FROM_ONE_LIST(TgPreset, tg_model_preset, TG_PRESET_CHOICES, TG_PRESET_COUNT);
    EXPECT_ENUM_FROM_ONE_LIST(TgFfnKind, tg_ffn_kind, TG_FFN_CHOICES, TG_FFN_KIND_COUNT);
    EXPECT_ENUM_FROM_ONE_LIST(TgPrecision, tg_precision, TG_FLAG_PRECISION_CHOICES, TG_PRECISION_COUNT);
    EXPECT_ENUM_FROM_ONE_LIST(TgEvalMetric, tg_eval_metric, TG_EVAL_METRIC_CHOICES, TG_EVAL_METRIC_COUNT);
    EXPECT_ENUM_FROM_ONE_LIST(TgLoraTarget, tg_lora_target, TG_ENUM_CHOICES(TG_LORA_TARGETS), TG_LORA_TARGET_COUNT);
    /* the table's enum rows offer exactly those choices */
    const TgOptTable *t = tg_train_option_table();
    const char *const settings[] = {"task", "preset", "ffn", "precision"};
    const char *const choices[] = {TG_TRAIN_TASK_CHOICES, TG_PRESET_CHOICES, TG_FFN_CHOICES, TG_FLAG_PRECISION_CHOICES};
    for (int i = 0; i < 4; i++) {
        int row = tg_opt_find_setting(t, settings[i]);
        cr_assert_geq(row, 0, "no row for `%s`", settings[i]);
        cr_expect_str_eq(t->specs[row].choices, choices[i], "`%s`", settings[i]);
    }
}
