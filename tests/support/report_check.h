/* Checks of generated reports and screenshots for the test suites: HTML tag balance, the
 * embedded JSON data block, the series drawn, and a tiny PNG decoder (zlib only). */
#ifndef TAPEGRAD_SUPPORT_REPORT_CHECK_H
#define TAPEGRAD_SUPPORT_REPORT_CHECK_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Reads a whole file, NUL-terminated (NULL if unreadable). */
char *check_read_file(const char *path, size_t *len);

/* Every element closed in order or self-closed ("/>" or a void element such as <meta>); no bare
 * '<' in text; a <script> element's content skipped up to its "</script>". On failure returns
 * false and says where in why. */
bool html_tags_balanced(const char *html, char *why, size_t cap);

/* The JSON of <script type="application/json" id="tapegrad-report-data">, parsed (NULL if absent
 * or malformed). Free with cJSON_Delete. */
cJSON *html_report_data(const char *html);

/* For every series of every chart in the data block, a <path data-series="NAME"> must be in the
 * HTML, and a <path data-band="NAME"> for a series with a range ("lo"/"hi"). Returns how many
 * series were checked, or -1 with the missing one named in why. */
int html_series_drawn(const char *html, const cJSON *data, char *why, size_t cap);

/* The first series of this name with at least min_points, in any chart of the data block (NULL if none). */
const cJSON *report_find_series(const cJSON *data, const char *name, int min_points);
/* Whether some chart of the data block has a series of this name with at least min_points. */
bool report_has_series(const cJSON *data, const char *name, int min_points);

/* An 8-bit, non-interlaced PNG, unfiltered: `channels` bytes per pixel, rows packed. */
typedef struct {
    uint32_t width, height;
    int channels;      /* 1 grey or palette index, 2 grey+alpha, 3 RGB, 4 RGBA */
    uint8_t *pixels;   /* height * width * channels */
} PngImage;

/* Returns false with the reason in why for anything this decoder does not handle. */
bool png_decode(const char *path, PngImage *img, char *why, size_t cap);
void png_free(PngImage *img);
/* Pixels that differ from the top-left one. */
uint64_t png_pixels_unlike_corner(const PngImage *img);
/* Pixels of an RGB or RGBA image whose red, green and blue each lie within `tolerance` of the
 * colour given (0 for a grey image). */
uint64_t png_pixels_near(const PngImage *img, uint8_t red, uint8_t green, uint8_t blue, int tolerance);

#endif
