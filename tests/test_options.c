/* The one options schema (lib/options.h): flags and values, ranges from any source, files of
 * saved options read back (in the current and the older "key value" form), and the training
 * options' table: validation once, identity and saved groups. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "datagen.h"
#include "lib/options.h"
#include "testutil.h"
#include "train/train_options.h"

typedef struct {
    int64_t steps;
    int threads;
    double lr, fraction;
    const char *name;
    bool verbose;
} Toy;

enum { SAVED = 1 };
static const OptSpec toy_specs[] = {
    OPT(Toy, steps, "--steps", OPT_INT64, "steps", OPT_POSITIVE, NULL, SAVED, NULL),
    OPT(Toy, threads, "--threads", OPT_INT, "threads", OPT_BETWEEN(1, 256), NULL, SAVED, NULL),
    OPT(Toy, lr, "--lr", OPT_DOUBLE, "learning rate", OPT_POSITIVE, NULL, SAVED, NULL),
    OPT(Toy, fraction, "--fraction", OPT_DOUBLE, "a share", OPT_FRACTION, NULL, 0, NULL),
    OPT(Toy, name, "--name", OPT_STRING, "a name", OPT_ANY, "alpha|beta", SAVED, NULL),
    OPT(Toy, verbose, "--verbose", OPT_BOOL, "talk", OPT_ANY, NULL, 0, NULL),
};
static const OptTable toy = {"toy", NULL, toy_specs, 6, 1};

static TgStatus parse(Toy *t, OptSet *given, const char *const *args, int n) {
    char *argv[16] = {"toy"};
    for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
    const char *positional[1];
    int n_positional = 0;
    bool help;
    return opt_parse(&toy, t, given, n + 1, argv, positional, &n_positional, &help);
}

Test(options, parse_sets_fields_and_given_bits) {
    Toy t = {.steps = 10, .threads = 2, .lr = 1e-3, .fraction = 0.5};
    OptSet given;
    assert_ok(parse(&t, &given, (const char *[]){"--steps", "40", "--lr=3e-3", "--name", "beta", "--verbose"}, 6));
    cr_expect_eq(t.steps, 40);
    cr_expect_eq(t.lr, 3e-3);
    cr_expect_str_eq(t.name, "beta");
    cr_expect(t.verbose);
    cr_expect_eq(t.threads, 2, "not given: unchanged");
    cr_expect_eq(given, OPT_BIT(0) | OPT_BIT(2) | OPT_BIT(4) | OPT_BIT(5));
}

Test(options, bad_values_name_the_flag_and_what_it_takes) {
    Toy t = {0};
    assert_fails(parse(&t, NULL, (const char *[]){"--steps", "0"}, 2), TG_ERR_ARG, "--steps must be positive, got 0");
    assert_fails(parse(&t, NULL, (const char *[]){"--steps", "12x"}, 2), TG_ERR_ARG, "--steps expects an integer");
    assert_fails(parse(&t, NULL, (const char *[]){"--steps", "99999999999999999999"}, 2), TG_ERR_ARG, "below 2^63");
    assert_fails(parse(&t, NULL, (const char *[]){"--threads", "300"}, 2), TG_ERR_ARG, "--threads must be in [1, 256]");
    assert_fails(parse(&t, NULL, (const char *[]){"--lr", "nan"}, 2), TG_ERR_ARG, "--lr expects a finite number");
    assert_fails(parse(&t, NULL, (const char *[]){"--fraction", "1"}, 2), TG_ERR_ARG, "must be in (0, 1)");
    assert_fails(parse(&t, NULL, (const char *[]){"--name", "gamma"}, 2), TG_ERR_ARG, "one of alpha|beta");
    assert_fails(parse(&t, NULL, (const char *[]){"--nope"}, 1), TG_ERR_ARG, "unknown flag '--nope'");
    assert_fails(parse(&t, NULL, (const char *[]){"--steps"}, 1), TG_ERR_ARG, "--steps needs a value");
    assert_fails(parse(&t, NULL, (const char *[]){"--verbose=1"}, 1), TG_ERR_ARG, "takes no value");
    assert_fails(parse(&t, NULL, (const char *[]){"a", "b"}, 2), TG_ERR_ARG, "unexpected argument 'b'");
}

Test(options, saved_file_round_trips_and_is_range_checked) {
    char *dir = datagen_tempdir(), *path = datagen_path(dir, "opts.txt");
    Toy t = {.steps = 77, .threads = 3, .lr = 0.125, .fraction = 0.25, .name = "alpha"};
    assert_ok(opt_write(&toy, &t, SAVED, path));
    Toy back = {.steps = 1, .threads = 1, .lr = 1, .fraction = 0.9};
    OptStrings strings = {0};
    OptSet read;
    /* --threads was given on the command line: the file does not override it */
    assert_ok(opt_read(&toy, &back, SAVED, OPT_BIT(1), path, &read, &strings));
    cr_expect_eq(back.steps, 77);
    cr_expect_eq(back.lr, 0.125);
    cr_expect_str_eq(back.name, "alpha");
    cr_expect_eq(back.threads, 1);
    cr_expect_eq(back.fraction, 0.9, "not in the saved group");
    cr_expect_eq(read, OPT_BIT(0) | OPT_BIT(2) | OPT_BIT(4));
    /* a value written by hand is checked as a flag would be, with the file and line named */
    datagen_write(dir, "opts.txt", "--steps 5\n--lr -1\n", 18);
    assert_fails(opt_read(&toy, &back, SAVED, 0, path, NULL, &strings), TG_ERR_ARG, "opts.txt line 2: --lr must be positive");
    /* the older "key value" form */
    datagen_write(dir, "opts.txt", "steps 9\nname beta\n", 18);
    assert_ok(opt_read(&toy, &back, SAVED, 0, path, NULL, &strings));
    cr_expect_eq(back.steps, 9);
    cr_expect_str_eq(back.name, "beta");
    datagen_write(dir, "opts.txt", "garbage\n", 8);
    assert_fails(opt_read(&toy, &back, SAVED, 0, path, NULL, &strings), TG_ERR_FORMAT, "expected \"--flag value\"");
    opt_strings_free(&strings);
    datagen_remove_tree(dir);
    free(path);
    free(dir);
}

/* The training table: every flag has help, a range or choices are enforced, and validation sees
 * the options against each other before anything is written. */
Test(options, training_options_are_validated_once_and_together) {
    const OptTable *t = train_option_table();
    for (int i = 0; i < t->count; i++) {
        cr_expect(t->specs[i].help && t->specs[i].help[0], "%s has no help", t->specs[i].flag);
        cr_expect_eq(strncmp(t->specs[i].flag, "--", 2), 0);
        for (int j = 0; j < i; j++) cr_expect_str_neq(t->specs[i].flag, t->specs[j].flag);
    }
    TrainOptions o;
    train_options_defaults(&o);
    assert_ok(train_options_validate(&o));
    o.resume = "run", o.out_dir = "elsewhere";
    assert_fails(train_options_validate(&o), TG_ERR_ARG, "drop --out");
    train_options_defaults(&o);
    o.stop_after = 2000;
    assert_fails(train_options_validate(&o), TG_ERR_ARG, "--stop-after 2000 is past --steps 1500");
    train_options_defaults(&o);
    o.steps = -3;
    o.given = OPT_BIT(opt_find(t, "--steps"));
    assert_fails(train_options_validate(&o), TG_ERR_ARG, "--steps must be positive, got -3");
    /* the saved group is what train_options.txt holds; identity options are never in it */
    for (int i = 0; i < t->count; i++)
        cr_expect(!((t->specs[i].group & TRAIN_OPT_SAVED) && (t->specs[i].group & TRAIN_OPT_IDENTITY)), "%s",
                  t->specs[i].flag);
}
