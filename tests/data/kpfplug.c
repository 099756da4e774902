/* The library tests/data/dlopen_later.c dlopens: libkpfplug.so. */
__attribute__((noinline)) int plug_add(int a, int b)
{
	return a + b;
}
