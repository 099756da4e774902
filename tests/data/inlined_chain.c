/* The differential target of tests/dwarf_stacks.rs, built there with
 * `cc -O2 -g -fomit-frame-pointer`: no frame pointers, so only DWARF call
 * frame information unwinds it, and two levels of inlining above the
 * probed function, so only DWARF debug information names them.
 *
 * The call chain at the probe on `leaf`, innermost first:
 *   leaf                 noinline, probed at its entry
 *   mix                  always_inline, in middle
 *   scramble             always_inline, in middle
 *   middle               noinline
 *   outer                noinline
 *   main
 * Each function uses its callee's result after the call, so no call is a
 * tail call that would drop a frame. `main` calls `outer` argv[1] times
 * (1000 without an argument), and exits 0. No header is included, so that the
 * compiler alone builds it. */

volatile unsigned long sink;

__attribute__((noinline)) unsigned long leaf(unsigned long x)
{
	sink += x;
	return sink ^ x;
}

static inline __attribute__((always_inline)) unsigned long mix(unsigned long x)
{
	return leaf(x * 3 + 1) + 7;
}

static inline __attribute__((always_inline)) unsigned long scramble(unsigned long x)
{
	return mix(x ^ 0x55) * 5 + sink;
}

__attribute__((noinline)) unsigned long middle(unsigned long x)
{
	unsigned long buf[16];
	for (int i = 0; i < 16; i++)
		buf[i] = x + (unsigned long)i * sink;
	return scramble(buf[x % 16]) + buf[(x + 3) % 16];
}

__attribute__((noinline)) unsigned long outer(unsigned long x)
{
	return middle(x + 1) * 3 + sink;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? 0 : 1000;
	for (const char *c = argc > 1 ? argv[1] : ""; *c >= '0' && *c <= '9'; c++)
		n = n * 10 + (*c - '0');
	unsigned long acc = 0;
	for (long i = 0; i < n; i++)
		acc += outer((unsigned long)i);
	sink = acc;
	return 0;
}
