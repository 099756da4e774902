/* A workload for tests/tests/perf_habits.rs: walk() returns -1 (an int)
 * for every third step, pick() takes a char. Built with frame pointers
 * and DWARF, as a program under development is. */
#include <stdio.h>
#include <stdlib.h>

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
	for (int i = 0; i < n; i++) {
		sum += walk(i);
		sum += pick('a' + i % 3);
	}
	printf("%ld\n", sum);
	return 0;
}
