/* Small-message ping-pong over TCP, made the way distributed-llama moves its syncs: TCP_NODELAY on both ends,
 * send() and recv() looped until the whole buffer is through. "blocking": blocking sockets, as v0.4.0's
 * Socket::read / Socket::write (src/socket.cpp@v0.4.0:21-60, 239-250). "spin": non-blocking sockets retried on
 * EAGAIN in a busy loop, as v0.16.4's turbo mode (src/nn/nn-network.cpp:34-45, 84-128, 399-403).
 *   pingpong server <port> <bytes> <rounds> <blocking|spin> [gap_us]   (gap: busy work before each reply, as a
 *                                                                     worker computes its slice before it answers)
 *   pingpong client <host> <port> <bytes> <rounds> <blocking|spin>  -> prints one line per round: ns of the round trip
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int spin = 0;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void setup(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (spin) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK);
}

static void put(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t s = send(fd, p, n, 0);
        if (s < 0) { if (errno == EAGAIN || errno == EWOULDBLOCK) continue; perror("send"); exit(2); }
        if (s == 0) { fprintf(stderr, "closed\n"); exit(2); }
        n -= (size_t)s; p += s;
    }
}

static void get(int fd, char *p, size_t n) {
    while (n > 0) {
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0) { if (errno == EAGAIN || errno == EWOULDBLOCK) continue; perror("recv"); exit(2); }
        if (r == 0) { fprintf(stderr, "closed\n"); exit(2); }
        n -= (size_t)r; p += r;
    }
}


int main(int argc, char **argv) {
    if (argc < 6) { fprintf(stderr, "usage: see the header\n"); return 1; }
    int server = strcmp(argv[1], "server") == 0;
    if (argc < (server ? 6 : 7)) { fprintf(stderr, "usage: see the header\n"); return 1; }
    int a = server ? 2 : 3;
    int port = atoi(argv[a]);
    size_t bytes = (size_t)atol(argv[a + 1]);
    int rounds = atoi(argv[a + 2]);
    spin = strcmp(argv[a + 3], "spin") == 0;
    char *buf = calloc(bytes, 1);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    int fd;
    if (server) {
        int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        addr.sin_addr.s_addr = INADDR_ANY;
        if (bind(ls, (struct sockaddr *)&addr, sizeof(addr)) || listen(ls, 1)) { perror("bind"); return 2; }
        fd = accept(ls, NULL, NULL);
        setup(fd);
        long long gap_ns = argc > 6 ? atol(argv[6]) * 1000LL : 0;
        for (int i = 0; i < rounds; i++) {
            get(fd, buf, bytes);
            for (long long t0 = now_ns(); gap_ns > 0 && now_ns() - t0 < gap_ns;) {}
            put(fd, buf, bytes);
        }
        return 0;
    }
    fd = socket(AF_INET, SOCK_STREAM, 0);
    inet_pton(AF_INET, argv[2], &addr.sin_addr);
    for (int tries = 0; connect(fd, (struct sockaddr *)&addr, sizeof(addr)); tries++) {
        if (tries > 200) { perror("connect"); return 2; }
        close(fd); usleep(10000); fd = socket(AF_INET, SOCK_STREAM, 0);
    }
    setup(fd);
    for (int i = 0; i < rounds; i++) {
        long long t0 = now_ns();
        put(fd, buf, bytes);
        get(fd, buf, bytes);
        printf("%lld\n", now_ns() - t0);
    }
    return 0;
}
