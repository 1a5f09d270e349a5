/* sgr: the native search client of the supergrep daemon (docs/daemon.md, "Native client").
 *
 * Why: a Python client pays its interpreter's start on every search (23-25 ms of a 2-core
 * machine's ~31 ms client overhead), more than the daemon needs to answer a warm search. This
 * client starts in about a millisecond. It understands nothing of the command line: it sends
 * argv, the working directory, whether stdout is a terminal and the environment variables the
 * launcher reads to the daemon's `argv` op, which parses them with the Python launcher's own
 * `parse_search` (one definition of the command line) and answers with the rendered output.
 * Whenever the daemon does not answer with output (no daemon, another command, an error to
 * report, an unknown option), it runs the Python CLI instead with the same arguments: exec of
 * $SUPERGREP_FALLBACK (set by `supergrep init`), else `supergrep` from PATH. So its output and
 * exit status are the Python launcher's, byte for byte.
 *
 * Wire format of the `argv` op (a private extension of the JSON-lines protocol: the raw bytes
 * after a header line are not JSON):
 *   request  {"v":1,"op":"argv","argv":[...],"cwd":"...","tty":true|false,"env":{...}}\n
 *   notice   {"v":1,"notice_bytes":N}\n + N bytes for stderr
 *   output   {"v":1,"ok":true,"exit_code":C,"bytes":N}\n + N bytes for stdout
 *   anything else: run the Python CLI.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_SOCKET_BYTES 100 /* supergrep.daemon.paths: longer homes use a hashed path (Python) */

static char **g_argv;

/* Hand the command to the Python CLI (never returns). */
static void fallback(void) {
    const char *cmd = getenv("SUPERGREP_FALLBACK");
    if (!cmd || !*cmd) cmd = "supergrep";
    g_argv[0] = (char *)cmd;
    execvp(cmd, g_argv);
    fprintf(stderr, "sgr: cannot run %s: %s\n", cmd, strerror(errno));
    exit(2);
}

typedef struct {
    char *p;
    size_t n, cap;
} buf_t;

static void put(buf_t *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) fallback();
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(buf_t *b, const char *s) { put(b, s, strlen(s)); }

/* Valid UTF-8 (no overlongs, no surrogates): otherwise the Python CLI handles the arguments. */
static int utf8_ok(const unsigned char *s) {
    while (*s) {
        unsigned c = *s;
        int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
        if (n < 0 || (n == 1 && c < 0xC2)) return 0;
        unsigned cp = n ? c & (0x3F >> n) : c;
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        s += n + 1;
    }
    return 1;
}

/* A JSON string (UTF-8 passes through; quotes, backslashes and control characters escaped). */
static void put_json(buf_t *b, const char *s) {
    if (!utf8_ok((const unsigned char *)s)) fallback();
    puts_(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            put(b, esc, 2);
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            puts_(b, esc);
        } else {
            put(b, (const char *)&c, 1);
        }
    }
    puts_(b, "\"");
}

static int write_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Buffered reads from the socket. */
static char rbuf[1 << 16];
static size_t rlen, rpos;

static int fill(int fd) {
    if (rpos < rlen) return 1;
    for (;;) {
        ssize_t r = read(fd, rbuf, sizeof rbuf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return 0;
        rlen = (size_t)r;
        rpos = 0;
        return 1;
    }
}

/* One header line (at most 255 bytes: ours are ~50). 0 at end of stream or on a long line. */
static int read_line(int fd, char *line, size_t cap) {
    size_t n = 0;
    for (;;) {
        if (!fill(fd)) return 0;
        char c = rbuf[rpos++];
        if (c == '\n') {
            line[n] = 0;
            return 1;
        }
        if (n + 1 >= cap) return 0;
        line[n++] = c;
    }
}

/* Copy n bytes from the socket to fd: -1 if the stream ends first, 0 if writing failed (the
 * reader went away, as with `| head`: the rest is read and dropped), 1 otherwise. */
static int relay(int sock, int fd, long long n) {
    int ok = 1;
    while (n > 0) {
        if (!fill(sock)) return -1;
        size_t k = rlen - rpos;
        if ((long long)k > n) k = (size_t)n;
        if (ok && write_all(fd, rbuf + rpos, k) < 0) ok = 0;
        rpos += k;
        n -= (long long)k;
    }
    return ok;
}

static void socket_path(char *out, size_t cap) {
    const char *home = getenv("SUPERGREP_HOME");
    char dir[4096];
    if (home && *home) {
        if (home[0] == '~' && (home[1] == '/' || !home[1])) {
            const char *h = getenv("HOME");
            if (!h) fallback();
            snprintf(dir, sizeof dir, "%s%s", h, home + 1);
        } else {
            snprintf(dir, sizeof dir, "%s", home);
        }
    } else {
        const char *h = getenv("HOME");
        if (!h || !*h) fallback();
#ifdef __APPLE__
        snprintf(dir, sizeof dir, "%s/Library/Application Support/supergrep", h);
#else
        const char *xdg = getenv("XDG_DATA_HOME");
        if (xdg && *xdg)
            snprintf(dir, sizeof dir, "%s/supergrep", xdg);
        else
            snprintf(dir, sizeof dir, "%s/.local/share/supergrep", h);
#endif
    }
    int n = snprintf(out, cap, "%s/daemon/daemon.sock", dir);
    if (n < 0 || (size_t)n >= cap || n > MAX_SOCKET_BYTES) fallback(); /* the hashed path: Python's job */
}

int main(int argc, char **argv) {
    g_argv = argv;
    signal(SIGPIPE, SIG_IGN); /* a closed stdout shows as EPIPE, handled in relay */
    const char *no = getenv("SUPERGREP_NO_DAEMON");
    if ((no && *no && strcmp(no, "0") != 0) || getenv("_SUPERGREP_COMPLETE") || argc < 2) fallback();

    char path[4096];
    socket_path(path, sizeof path);
    int sock = socket(AF_UNIX, SOCK_STREAM, 0);
    if (sock < 0) fallback();
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    memcpy(addr.sun_path, path, strlen(path) + 1);
    if (connect(sock, (struct sockaddr *)&addr, sizeof addr) < 0) fallback(); /* none runs, or stale */

    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) fallback();
    buf_t req = {0};
    puts_(&req, "{\"v\":1,\"op\":\"argv\",\"argv\":[");
    for (int i = 1; i < argc; i++) {
        if (i > 1) puts_(&req, ",");
        put_json(&req, argv[i]);
    }
    puts_(&req, "],\"cwd\":");
    put_json(&req, cwd);
    puts_(&req, isatty(STDOUT_FILENO) ? ",\"tty\":true,\"env\":{" : ",\"tty\":false,\"env\":{");
    static const char *env_names[] = {"SUPERGREP_INDEX_DIR", "SUPERGREP_MODEL", "NO_COLOR"};
    int first = 1;
    for (size_t i = 0; i < sizeof env_names / sizeof *env_names; i++) {
        const char *v = getenv(env_names[i]);
        if (!v) continue;
        if (!first) puts_(&req, ",");
        first = 0;
        put_json(&req, env_names[i]);
        puts_(&req, ":");
        put_json(&req, v);
    }
    puts_(&req, "}}\n");
    if (write_all(sock, req.p, req.n) < 0) fallback();

    char line[256];
    for (;;) {
        if (!read_line(sock, line, sizeof line)) fallback(); /* the daemon went away */
        long long n;
        int code;
        if (sscanf(line, "{\"v\":1,\"notice_bytes\":%lld}", &n) == 1 && n >= 0) {
            if (relay(sock, STDERR_FILENO, n) < 0) fallback();
            continue;
        }
        char tail[4];
        if (sscanf(line, "{\"v\":1,\"ok\":true,\"exit_code\":%d,\"bytes\":%lld%3s", &code, &n, tail) == 3 &&
            strcmp(tail, "}") == 0 && n >= 0 && (code == 0 || code == 1)) {
            const int r = relay(sock, STDOUT_FILENO, n);
            if (r < 0) {
                fprintf(stderr, "sgr: the daemon went away mid-answer; run the search again\n");
                return 2;
            }
            return r ? code : 0; /* a closed stdout is not an error (as the Python launcher) */
        }
        fallback(); /* a fallback, an error to report, another command: the Python CLI */
    }
}
