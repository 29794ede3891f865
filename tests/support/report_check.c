#include "report_check.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

char *check_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = buf ? fread(buf, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    fclose(f);
    if (!buf) return NULL;
    buf[got] = '\0';
    if (len) *len = got;
    return buf;
}

/* ---------------------------------------------------------------- HTML */

static bool is_void_element(const char *name) {
    static const char *const voids[] = {"meta", "link", "br", "hr", "img", "input", "area", "base", "col", "wbr"};
    for (size_t i = 0; i < sizeof voids / sizeof voids[0]; i++)
        if (strcmp(name, voids[i]) == 0) return true;
    return false;
}

static long line_of(const char *html, const char *p) {
    long line = 1;
    for (const char *q = html; q < p; q++) line += *q == '\n';
    return line;
}

bool html_tags_balanced(const char *html, char *why, size_t cap) {
    enum { MAX_DEPTH = 256, NAME_CAP = 32 };
    char stack[MAX_DEPTH][NAME_CAP];
    int depth = 0;
    const char *p = html;
    while ((p = strchr(p, '<')) != NULL) {
        if (strncmp(p, "<!--", 4) == 0) {
            const char *end = strstr(p, "-->");
            if (!end) return snprintf(why, cap, "unclosed comment at line %ld", line_of(html, p)), false;
            p = end + 3;
            continue;
        }
        if (p[1] == '!') { /* <!DOCTYPE html> */
            p = strchr(p, '>');
            if (!p) return snprintf(why, cap, "unclosed declaration"), false;
            continue;
        }
        bool closing = p[1] == '/';
        const char *n = p + 1 + closing;
        char name[NAME_CAP];
        size_t len = 0;
        while (isalnum((unsigned char)n[len]) && len < NAME_CAP - 1) {
            name[len] = (char)tolower((unsigned char)n[len]);
            len++;
        }
        name[len] = '\0';
        if (len == 0) return snprintf(why, cap, "bare '<' in text at line %ld", line_of(html, p)), false;
        /* find the tag's '>' outside quoted attribute values */
        const char *q = n + len;
        char quote = 0;
        while (*q && (quote || *q != '>')) {
            if (quote && *q == quote) quote = 0;
            else if (!quote && (*q == '"' || *q == '\'')) quote = *q;
            q++;
        }
        if (!*q) return snprintf(why, cap, "tag <%s> at line %ld never ends", name, line_of(html, p)), false;
        bool self_closed = q[-1] == '/';
        if (closing) {
            if (depth == 0 || strcmp(stack[depth - 1], name) != 0)
                return snprintf(why, cap, "</%s> at line %ld closes <%s>", name, line_of(html, p),
                                depth ? stack[depth - 1] : "nothing"),
                       false;
            depth--;
        } else if (strcmp(name, "script") == 0 && !self_closed) {
            const char *end = strstr(q, "</script>");
            if (!end) return snprintf(why, cap, "<script> at line %ld never closed", line_of(html, p)), false;
            q = end + strlen("</script>") - 1;
        } else if (!self_closed && !is_void_element(name)) {
            if (depth == MAX_DEPTH) return snprintf(why, cap, "nesting deeper than %d", MAX_DEPTH), false;
            snprintf(stack[depth++], NAME_CAP, "%s", name);
        }
        p = q + 1;
    }
    if (depth) return snprintf(why, cap, "<%s> never closed", stack[depth - 1]), false;
    return true;
}

cJSON *html_report_data(const char *html) {
    const char *open = "<script type=\"application/json\" id=\"tapegrad-report-data\">";
    const char *start = strstr(html, open);
    if (!start) return NULL;
    start += strlen(open);
    const char *end = strstr(start, "</script>");
    if (!end) return NULL;
    return cJSON_ParseWithLength(start, (size_t)(end - start));
}

static void escape_html(const char *s, char *out, size_t cap) {
    size_t o = 0;
    for (; *s && o + 7 < cap; s++) {
        const char *rep = *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : *s == '&' ? "&amp;" : *s == '"' ? "&quot;" : NULL;
        if (rep) o += (size_t)snprintf(out + o, cap - o, "%s", rep);
        else out[o++] = *s;
    }
    out[o] = '\0';
}

int html_series_drawn(const char *html, const cJSON *data, char *why, size_t cap) {
    int checked = 0;
    const cJSON *chart, *series;
    cJSON_ArrayForEach(chart, cJSON_GetObjectItemCaseSensitive(data, "charts")) {
        cJSON_ArrayForEach(series, cJSON_GetObjectItemCaseSensitive(chart, "series")) {
            const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(series, "name"));
            if (!name) return snprintf(why, cap, "a series without a name"), -1;
            char escaped[512], needle[600];
            escape_html(name, escaped, sizeof escaped);
            snprintf(needle, sizeof needle, "data-series=\"%s\"", escaped);
            if (!strstr(html, needle)) return snprintf(why, cap, "series '%s' is not drawn", name), -1;
            snprintf(needle, sizeof needle, "data-band=\"%s\"", escaped);
            if (cJSON_GetObjectItemCaseSensitive(series, "lo") && !strstr(html, needle))
                return snprintf(why, cap, "series '%s' has a range but no band drawn", name), -1;
            checked++;
        }
    }
    return checked;
}

const cJSON *report_find_series(const cJSON *data, const char *name, int min_points) {
    const cJSON *chart, *series;
    cJSON_ArrayForEach(chart, cJSON_GetObjectItemCaseSensitive(data, "charts")) {
        cJSON_ArrayForEach(series, cJSON_GetObjectItemCaseSensitive(chart, "series")) {
            const char *n = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(series, "name"));
            if (n && strcmp(n, name) == 0 &&
                cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(series, "y")) >= min_points)
                return series;
        }
    }
    return NULL;
}

bool report_has_series(const cJSON *data, const char *name, int min_points) {
    return report_find_series(data, name, min_points) != NULL;
}

/* ---------------------------------------------------------------- PNG */

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

static uint8_t paeth(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    return (uint8_t)(pa <= pb && pa <= pc ? a : pb <= pc ? b : c);
}

bool png_decode(const char *path, PngImage *img, char *why, size_t cap) {
    memset(img, 0, sizeof *img);
    size_t len;
    uint8_t *file = (uint8_t *)check_read_file(path, &len);
    if (!file) return snprintf(why, cap, "cannot read %s", path), false;
    static const uint8_t signature[8] = {137, 'P', 'N', 'G', '\r', '\n', 26, '\n'};
    bool ok = false;
    uint8_t *idat = NULL, *raw = NULL;
    size_t idat_len = 0;
    int bit_depth = 0, colour = -1, interlace = 0;
    if (len < 8 || memcmp(file, signature, 8) != 0) {
        snprintf(why, cap, "%s is not a PNG", path);
        goto done;
    }
    for (size_t pos = 8; pos + 12 <= len;) {
        uint32_t n = be32(file + pos);
        const uint8_t *type = file + pos + 4, *data = file + pos + 8;
        if (pos + 12 + n > len) {
            snprintf(why, cap, "truncated chunk");
            goto done;
        }
        if (memcmp(type, "IHDR", 4) == 0 && n >= 13) {
            img->width = be32(data), img->height = be32(data + 4);
            bit_depth = data[8], colour = data[9], interlace = data[12];
        } else if (memcmp(type, "IDAT", 4) == 0) {
            idat = realloc(idat, idat_len + n + 1);
            memcpy(idat + idat_len, data, n);
            idat_len += n;
        } else if (memcmp(type, "IEND", 4) == 0) {
            break;
        }
        pos += 12 + n;
    }
    static const int channels_of[7] = {1, 0, 3, 1, 2, 0, 4};
    if (bit_depth != 8 || interlace != 0 || colour < 0 || colour > 6 || channels_of[colour] == 0 || !idat) {
        snprintf(why, cap, "unsupported PNG: depth %d, colour type %d, interlace %d", bit_depth, colour, interlace);
        goto done;
    }
    img->channels = channels_of[colour];
    size_t stride = (size_t)img->width * (size_t)img->channels;
    uLongf raw_len = (uLongf)((stride + 1) * img->height);
    raw = malloc(raw_len + 1);
    if (uncompress(raw, &raw_len, idat, (uLong)idat_len) != Z_OK || raw_len != (stride + 1) * img->height) {
        snprintf(why, cap, "IDAT does not inflate to %u rows of %zu bytes", img->height, stride + 1);
        goto done;
    }
    img->pixels = malloc(stride * img->height + 1);
    int bpp = img->channels;
    for (uint32_t y = 0; y < img->height; y++) {
        const uint8_t *in = raw + y * (stride + 1) + 1;
        uint8_t *out = img->pixels + y * stride, *prev = y ? out - stride : NULL;
        int filter = in[-1];
        for (size_t x = 0; x < stride; x++) {
            int a = x >= (size_t)bpp ? out[x - bpp] : 0, b = prev ? prev[x] : 0;
            int c = prev && x >= (size_t)bpp ? prev[x - bpp] : 0;
            int pred = filter == 0 ? 0 : filter == 1 ? a : filter == 2 ? b : filter == 3 ? (a + b) / 2 : paeth(a, b, c);
            if (filter > 4) {
                snprintf(why, cap, "row %u has filter type %d", y, filter);
                goto done;
            }
            out[x] = (uint8_t)(in[x] + pred);
        }
    }
    ok = true;
done:
    free(file);
    free(idat);
    free(raw);
    if (!ok) png_free(img);
    return ok;
}

void png_free(PngImage *img) {
    free(img->pixels);
    memset(img, 0, sizeof *img);
}

uint64_t png_pixels_unlike_corner(const PngImage *img) {
    uint64_t n = 0, count = (uint64_t)img->width * img->height;
    for (uint64_t i = 1; i < count; i++)
        n += memcmp(img->pixels + i * (uint64_t)img->channels, img->pixels, (size_t)img->channels) != 0;
    return n;
}

uint64_t png_pixels_near(const PngImage *img, uint8_t red, uint8_t green, uint8_t blue, int tolerance) {
    if (img->channels < 3) return 0;
    uint64_t n = 0, count = (uint64_t)img->width * img->height;
    const int want[3] = {red, green, blue};
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *p = img->pixels + i * (uint64_t)img->channels;
        n += abs(p[0] - want[0]) <= tolerance && abs(p[1] - want[1]) <= tolerance && abs(p[2] - want[2]) <= tolerance;
    }
    return n;
}
