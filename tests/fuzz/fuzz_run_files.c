/* The text files of a run folder, as `train --resume` reads them: run.txt (tg_run_identity_read),
 * train_options.txt (tg_train_options_restore, then the one validation of the options) and latest
 * (tg_checkpoint_resolve, and the listing of the folder's other checkpoints). The input is the
 * three files joined by FUZZ_SEPARATOR. */
#include "fuzz_support.h"
#include "checkpoint/checkpoint_folder.h"
#include "run/run.h"
#include "run/train_options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *parts[3];
    size_t lens[3];
    fuzz_split(data, size, 3, parts, lens);
    fuzz_write(TG_RUN_IDENTITY_FILE, parts[0], lens[0]);
    fuzz_write(TG_TRAIN_OPTIONS_FILE, parts[1], lens[1]);
    fuzz_write("latest", parts[2], lens[2]);
    const char *dir = fuzz_scratch();

    TgRunSpec id;
    TgTrainOptions o, saved;
    TgOptStrings strings = {0};
    tg_run_identity_read(dir, &id, &strings);
    tg_opt_strings_free(&strings);
    tg_train_options_defaults(&o);
    o.invocation.resume = dir;
    if (tg_train_options_restore(dir, &o, &saved, &strings) == TG_OK && tg_train_options_validate(&o) == TG_OK)
        tg_train_options_derive(&o);
    tg_opt_strings_free(&strings);

    char path[4200], others[512];
    tg_checkpoint_resolve(dir, path, sizeof path);
    tg_checkpoint_folder_others(dir, NULL, others, sizeof others);
    return 0;
}
