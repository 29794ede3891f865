#include "lib/version.h"

const char *tapegrad_version(void) { return TAPEGRAD_VERSION; }
