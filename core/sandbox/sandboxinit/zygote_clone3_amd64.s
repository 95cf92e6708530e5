//go:build linux && !silas_fuzz && !race

#include "textflag.h"

// func clone3Init(args *cloneArgs, size uintptr, a *forkArgs) (r1, err uintptr)
//
// clone3(2) for a forked init on a stack of its own (args.stack, in the
// zygote's fork region): the parent returns the child's pid; the child
// starts on that stack, where no Go frame lies above it, and calls
// childStart(a), which never returns. Only RCX and R11 are clobbered by
// SYSCALL, so a stays in R12 in both.
TEXT ·clone3Init(SB),NOSPLIT|NOFRAME,$0-40
	MOVQ	args+0(FP), DI
	MOVQ	size+8(FP), SI
	MOVQ	a+16(FP), R12
	MOVQ	$435, AX // SYS_clone3
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$-1, r1+24(FP)
	NEGQ	AX
	MOVQ	AX, err+32(FP)
	RET
ok:
	MOVQ	AX, r1+24(FP)
	MOVQ	$0, err+32(FP)
	RET
child:
	MOVQ	$0, BP // no caller's frame to walk back to
	ANDQ	$~15, SP
	SUBQ	$16, SP
	MOVQ	R12, 0(SP)
	CALL	·childStart(SB)
	// childStart never returns; if it did, end here.
	MOVL	$126, DI
	MOVL	$231, AX // SYS_exit_group
	SYSCALL
	JMP	child
