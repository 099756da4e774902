# The target of tests/tests/uprobe_bounds.rs: functions with known
# instructions, assembled at test time with `cc`.
	.text
	.globl	probe_target
	.type	probe_target, @function
# +0 push %rbp; +1 mov %rsp,%rbp; +4 movabs (10 bytes); +14 add %rdi,%rax;
# +17 pop %rbp; +18 ret: 19 bytes.
probe_target:
	push	%rbp
	mov	%rsp, %rbp
	movabs	$0x1122334455667788, %rax
	add	%rdi, %rax
	pop	%rbp
	ret
	.size	probe_target, .-probe_target

# One instruction per line, for comparing the uprobe rules with the
# kernel's answers (never called).
	.globl	mixed_insns
	.type	mixed_insns, @function
mixed_insns:
	vpxor	%xmm0, %xmm0, %xmm0
	vmovaps	%xmm1, %xmm0
	syscall
	ud2
	lock cmpxchg %rcx, (%rdx)
	.byte	0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0
	notrack jmp *%rax
	.byte	0x66, 0xeb, 0x00
	push	%rbp
	mov	%fs:0x28, %rax
	int3
	hlt
	in	%dx, %al
	lea	0x10(%rip), %rax
	call	probe_target
	vpcmpeqb %xmm1, %xmm0, %xmm0
	ret
	.size	mixed_insns, .-mixed_insns

# cmp_fn(x): compares x with itself bytewise (vpcmpeqb) and returns the
# mask, 0xffff; +10 is the vpcmpeqb.
	.globl	cmp_fn
	.type	cmp_fn, @function
cmp_fn:
	vmovq	%rdi, %xmm0
	vmovq	%rdi, %xmm1
	vpcmpeqb %xmm1, %xmm0, %xmm0
	vpmovmskb %xmm0, %eax
	ret
	.size	cmp_fn, .-cmp_fn

# main: calls probe_target(argc) 7 times after waiting for a byte on
# stdin (so the test can arm its probes first), then cmp_fn(5), and prints
# both results.
	.globl	main
	.type	main, @function
main:
	push	%rbx
	push	%r12
	sub	$24, %rsp
	mov	%edi, %r12d
	call	getchar
	mov	$7, %ebx
1:	movslq	%r12d, %rdi
	call	probe_target
	mov	%rax, 8(%rsp)
	dec	%ebx
	jnz	1b
	mov	$5, %edi
	call	cmp_fn
	mov	%eax, %edx
	mov	8(%rsp), %rsi
	lea	fmt(%rip), %rdi
	xor	%eax, %eax
	call	printf
	xor	%eax, %eax
	add	$24, %rsp
	pop	%r12
	pop	%rbx
	ret
	.size	main, .-main

	.section .rodata
fmt:	.string	"%lx %x\n"
	.section .note.GNU-stack,"",@progbits
