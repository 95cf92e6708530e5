//go:build linux && !silas_fuzz

#include "textflag.h"

// func rawVfork(trap, a1, a2, a3 uintptr) (r1, err uintptr)
//
// syscall.rawVforkSyscall's body: a clone with CLONE_VM|CLONE_VFORK whose
// child returns into its caller on the parent's stack. The return address
// is kept in a register across the call, so the child's later calls,
// which overwrite the stack below the caller's frame, cannot send the
// parent back to the wrong place when it resumes.
TEXT ·rawVfork(SB),NOSPLIT|NOFRAME,$0-48
	MOVQ	a1+8(FP), DI
	MOVQ	a2+16(FP), SI
	MOVQ	a3+24(FP), DX
	MOVQ	$0, R10
	MOVQ	$0, R8
	MOVQ	$0, R9
	MOVQ	trap+0(FP), AX
	POPQ	R12
	SYSCALL
	PUSHQ	R12
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$-1, r1+32(FP)
	NEGQ	AX
	MOVQ	AX, err+40(FP)
	RET
ok:
	MOVQ	AX, r1+32(FP)
	MOVQ	$0, err+40(FP)
	RET
