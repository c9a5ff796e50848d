/* LD_PRELOAD=segv_backtrace.so python ...: on SIGSEGV, print the native stack (library and
 * offset of each frame) to stderr and exit with 139. For crashes that happen after Python's
 * faulthandler is gone, such as in a library's static destructors at process exit.
 * Build: cc -shared -fPIC -O1 -o segv_backtrace.so segv_backtrace.c */
#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

static void on_segv(int sig) {
    void *frames[64];
    int n = backtrace(frames, 64);
    static const char header[] = "native backtrace at SIGSEGV:\n";
    (void)sig;
    (void)!write(2, header, sizeof header - 1);
    backtrace_symbols_fd(frames, n, 2);
    _exit(139);
}

__attribute__((constructor)) static void install(void) { signal(SIGSEGV, on_segv); }
