/* The output queues of cli/output.h: one per stream, each with a writer thread. */
#include "cli/output.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tapegrad/error.h"

typedef struct Queue {
    int fd;
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* text queued, or stop asked */
    pthread_cond_t drained;  /* the queue ran empty, or the stream failed */
    pthread_t thread;
    bool running, stop, writing;
    char *text;              /* what waits, in order */
    size_t len, cap;
    uint64_t dropped_lines;  /* dropped since the last notice */
    uint64_t lost;           /* bytes dropped or refused, in all */
    int error;               /* errno of the write that failed; the stream is then dead */
} Queue;

static Queue queues[CLI_STREAMS] = {
    {.fd = STDOUT_FILENO, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
     .drained = PTHREAD_COND_INITIALIZER},
    {.fd = STDERR_FILENO, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
     .drained = PTHREAD_COND_INITIALIZER},
};

static bool closed_at_start[CLI_STREAMS];

/* When stdout and stderr are one file (2>&1, a terminal), both go through stdout's queue, so a
 * note and the error after it arrive in the order they were written. */
static bool one_file;

static Queue *queue_of(CliStream s) { return &queues[one_file ? CLI_STDOUT : s]; }

static bool same_file(int a, int b) {
    struct stat sa, sb;
    return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

void cli_output_guard_standard_streams(void) {
    static const char *stand_in[3] = {"/dev/null", "/dev/full", "/dev/null"};
    for (int fd = 0; fd < 3; fd++) {
        if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        /* open gives the lowest free number: this one */
        int got = open(stand_in[fd], fd == 0 ? O_RDONLY : O_WRONLY);
        if (got >= 0 && got != fd) close(got);
        if (fd > 0) closed_at_start[fd - 1] = true;
    }
}

bool cli_output_was_closed(CliStream stream) { return closed_at_start[stream]; }

static FILE *stdio_of(CliStream s) { return s == CLI_STDOUT ? stdout : stderr; }

/* Writes all of buf to fd; 0, or the errno that stopped it. */
static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return n < 0 ? errno : EIO;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static size_t count_lines(const char *text, size_t len) {
    size_t n = 0;
    for (size_t i = 0; i < len; i++) n += text[i] == '\n';
    return n ? n : 1;
}

/* The writer: takes everything queued at once, writes it with the lock released, and after a
 * batch says how many lines it had to drop meanwhile. */
static void *writer(void *arg) {
    Queue *q = arg;
    char *batch = NULL;
    size_t batch_cap = 0;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        while (q->len == 0 && !q->stop) pthread_cond_wait(&q->wake, &q->lock);
        if (q->len == 0) break; /* stop asked and nothing left */
        char *taken = q->text;  /* swap buffers: the producers go on into the other one */
        size_t len = q->len, cap = q->cap;
        q->text = batch, q->cap = batch_cap, q->len = 0;
        batch = taken, batch_cap = cap;
        uint64_t dropped = q->dropped_lines;
        q->dropped_lines = 0;
        q->writing = true;
        pthread_mutex_unlock(&q->lock);
        int err = write_all(q->fd, batch, len);
        if (!err && dropped) {
            char notice[160];
            int n = snprintf(notice, sizeof notice,
                             "[tapegrad: %llu lines not shown here: this output fell behind; the run's log.txt has them]\n",
                             (unsigned long long)dropped);
            err = write_all(q->fd, notice, (size_t)n);
        }
        pthread_mutex_lock(&q->lock);
        q->writing = false;
        if (err) {
            q->error = err;
            q->lost += len + q->len;
            q->len = 0;
            break;
        }
        if (q->len == 0) pthread_cond_broadcast(&q->drained);
    }
    q->writing = false;
    pthread_cond_broadcast(&q->drained);
    pthread_mutex_unlock(&q->lock);
    free(batch);
    return NULL;
}

void cli_output_start(void) {
    fflush(stdout);
    fflush(stderr);
    /* the writers take no signals: SIGINT/SIGTERM/SIGHUP belong to the training loop */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    if (!queues[CLI_STDOUT].running && !queues[CLI_STDERR].running)
        one_file = same_file(STDOUT_FILENO, STDERR_FILENO);
    for (int i = 0; i < (one_file ? 1 : CLI_STREAMS); i++) {
        Queue *q = &queues[i];
        pthread_mutex_lock(&q->lock);
        if (!q->running && !q->error) {
            q->stop = false;
            q->running = pthread_create(&q->thread, NULL, writer, q) == 0;
        }
        pthread_mutex_unlock(&q->lock);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static struct timespec deadline_after(double s) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    double whole = (double)(time_t)s;
    t.tv_sec += (time_t)whole;
    t.tv_nsec += (long)((s - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}

bool cli_output_finish(double max_wait_s) {
    bool complete = true;
    struct timespec until = deadline_after(max_wait_s > 0 ? max_wait_s : 0);
    for (int i = 0; i < (one_file ? 1 : CLI_STREAMS); i++) {
        Queue *q = &queues[i];
        pthread_mutex_lock(&q->lock);
        if (!q->running) {
            complete = complete && q->lost == 0;
            pthread_mutex_unlock(&q->lock);
            continue;
        }
        q->stop = true;
        pthread_cond_signal(&q->wake);
        bool timed_out = false;
        while ((q->len > 0 || q->writing) && !q->error && !timed_out)
            timed_out = max_wait_s >= 0 ? pthread_cond_timedwait(&q->drained, &q->lock, &until) == ETIMEDOUT
                                        : (pthread_cond_wait(&q->drained, &q->lock), false);
        bool done = q->len == 0 && !q->writing;
        if (!done) {
            /* the stream does not take its text (a reader that stopped): the process ends without it */
            q->lost += q->len;
            complete = false;
            pthread_mutex_unlock(&q->lock);
            continue;
        }
        q->running = false;
        complete = complete && q->lost == 0 && q->dropped_lines == 0;
        pthread_mutex_unlock(&q->lock);
        pthread_join(q->thread, NULL);
    }
    return complete;
}

void cli_output_write(CliStream stream, const char *text, size_t len) {
    Queue *q = queue_of(stream);
    pthread_mutex_lock(&q->lock);
    if (!q->running) {
        pthread_mutex_unlock(&q->lock);
        FILE *f = stdio_of(stream);
        fwrite(text, 1, len, f);
        fflush(f);
        return;
    }
    if (q->error) {
        q->lost += len;
    } else if (q->len + len > CLI_OUTPUT_QUEUE_MAX) {
        q->lost += len;
        q->dropped_lines += count_lines(text, len);
    } else {
        if (q->len + len > q->cap) {
            size_t cap = q->cap ? q->cap : 4096;
            while (cap < q->len + len) cap *= 2;
            q->text = tg_realloc(q->text, cap);
            q->cap = cap;
        }
        memcpy(q->text + q->len, text, len);
        q->len += len;
        pthread_cond_signal(&q->wake);
    }
    pthread_mutex_unlock(&q->lock);
}

void cli_output_printf(CliStream stream, const char *fmt, ...) {
    char small[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        cli_output_write(stream, small, (size_t)n);
        return;
    }
    char *big = tg_malloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    cli_output_write(stream, big, (size_t)n);
    free(big);
}

int cli_output_error(CliStream stream) {
    Queue *q = queue_of(stream);
    pthread_mutex_lock(&q->lock);
    int e = q->error;
    pthread_mutex_unlock(&q->lock);
    return e;
}

uint64_t cli_output_lost(CliStream stream) {
    Queue *q = queue_of(stream);
    pthread_mutex_lock(&q->lock);
    uint64_t n = q->lost;
    pthread_mutex_unlock(&q->lock);
    return n;
}
