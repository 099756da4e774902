/* A workload for tests/tests/dlopen_later.rs: a program that maps a
 * library only after it has started, with dlopen, as a plugin is loaded.
 *
 * `dlopen_later N [wait]`: with `wait`, waits for a line on its standard
 * input first (a recorder attaches meanwhile); says whether libkpfplug
 * is mapped yet (it is not),
 * then dlopens libkpfplug.so (found through LD_LIBRARY_PATH, as the
 * loader finds it) and calls its plug_add(i, 10 * i) for i in 0..N. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int mapped(const char *name)
{
	char line[512];
	int found = 0;
	FILE *maps = fopen("/proc/self/maps", "r");
	if (!maps)
		return -1;
	while (fgets(line, sizeof line, maps))
		found |= strstr(line, name) != NULL;
	fclose(maps);
	return found;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 3;
	if (argc > 2 && getchar() == EOF)
		return 1;
	printf("mapped before dlopen: %d\n", mapped("libkpfplug"));
	void *lib = dlopen("libkpfplug.so", RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	int (*plug_add)(int, int) = (int (*)(int, int))dlsym(lib, "plug_add");
	if (!plug_add)
		return 1;
	long sum = 0;
	for (int i = 0; i < n; i++)
		sum += plug_add(i, 10 * i);
	printf("sum %ld\n", sum);
	return 0;
}
