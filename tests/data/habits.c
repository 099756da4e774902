/* A workload for tests/tests/perf_habits.rs: walk() returns -1 (an int)
 * for every third step, pick() takes a char. Built with frame pointers
 * and DWARF, as a program under development is.
 *
 * `habits N PROGRAM`: waits for a line on its standard input (a recorder
 * starts meanwhile, and the test writes the line once it records), walks
 * N steps, then execs PROGRAM with the argument N. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__attribute__((noinline)) int walk(int n)
{
	return n % 3 == 0 ? -1 : n;
}

__attribute__((noinline)) char pick(char c)
{
	return c;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 6;
	long sum = 0;
	if (argc > 2 && getchar() == EOF)
		return 1;
	for (int i = 0; i < n; i++) {
		sum += walk(i);
		sum += pick('a' + i % 3);
	}
	printf("%ld\n", sum);
	if (argc > 2) {
		fflush(stdout);
		execl(argv[2], argv[2], argv[1], (char *)NULL);
		return 1;
	}
	return 0;
}
