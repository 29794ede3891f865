/* The text files of a run folder, as `train --resume` reads them: run.txt (run_identity_read),
 * train_options.txt (train_options_restore, then the one validation of the options) and latest
 * (checkpoint_resolve, and the listing of the folder's other checkpoints). The input is the
 * three files joined by FUZZ_SEPARATOR. */
#include "fuzz_support.h"
#include "checkpoint/checkpoint_folder.h"
#include "run/run.h"
#include "run/train_options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *parts[3];
    size_t lens[3];
    fuzz_split(data, size, 3, parts, lens);
    fuzz_write(RUN_IDENTITY_FILE, parts[0], lens[0]);
    fuzz_write(TRAIN_OPTIONS_FILE, parts[1], lens[1]);
    fuzz_write("latest", parts[2], lens[2]);
    const char *dir = fuzz_scratch();

    TrainOptions id, o, saved;
    OptStrings strings = {0};
    run_identity_read(dir, &id, &strings);
    opt_strings_free(&strings);
    train_options_defaults(&o);
    o.resume = dir;
    if (train_options_restore(dir, &o, &saved, &strings) == TG_OK && train_options_validate(&o) == TG_OK)
        train_options_derive(&o);
    opt_strings_free(&strings);

    char path[4200], others[512];
    checkpoint_resolve(dir, path, sizeof path);
    checkpoint_folder_others(dir, NULL, others, sizeof others);
    return 0;
}
