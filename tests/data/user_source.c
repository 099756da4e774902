#include <stdio.h>
#include <stdlib.h>

struct point {
	long x;
	long y;
	const char *name;
};

__attribute__((noinline)) void sink(long v)
{
	__asm__ volatile("" : : "r"(v) : "memory");
}

static inline __attribute__((always_inline)) long mix(long a, long b)
{
	long m = a * 3 + b;
	sink(m);
	return m;
}

__attribute__((noinline)) long walk(struct point *p, int rounds)
{
	long total = 0;
	for (int i = 0; i < rounds; i++) {
		long step = mix(p->x + i, p->y);
		sink(step);
		total += step;
	}
	sink(total);
	return total;
}

int main(int argc, char **argv)
{
	if (argc < 5)
		return 2;
	struct point p = { atol(argv[1]), atol(argv[2]), argv[3] };
	int rounds = atoi(argv[4]);
	printf("%ld\n", walk(&p, rounds));
	return 0;
}

/*
 * The program of tests/tests/user_source_lines.rs (issue #27): built with
 * `cc -O2 -g`, it is probed by source line and variable name. `walk`
 * keeps its locals in registers and `p` in main's frame; `mix` is inlined
 * into walk's loop. Lines are named by number there: add text only below.
 */
