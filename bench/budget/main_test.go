package main

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

// script is perf script output (-F ip,sym,dso) with five samples: a copy in
// a send, the loopback receive inside a send, a receive, a CRC and the engine.
const script = `
	ffffffff81baf9f0 _copy_from_iter ([kernel.kallsyms])
	ffffffff81e810d9 __sys_sendmmsg ([kernel.kallsyms])
	ffffffff8225aa01 do_syscall_64 ([kernel.kallsyms])
	            9dce internal/runtime/syscall/linux.Syscall6 (/tmp/bench.test)

	ffffffff820a6100 udp_queue_rcv_one_skb ([kernel.kallsyms])
	ffffffff81eb6778 net_rx_action ([kernel.kallsyms])
	ffffffff81e810d9 __sys_sendmmsg ([kernel.kallsyms])
	            9dce internal/runtime/syscall/linux.Syscall6 (/tmp/bench.test)

	ffffffff820a74b0 udp_recvmsg ([kernel.kallsyms])
	ffffffff81e7f6a8 ___sys_recvmsg ([kernel.kallsyms])
	ffffffff81e7f6a9 do_recvmmsg ([kernel.kallsyms])

	          1a2b3c github.com/goroce/goroce/bth.crcClmul.abi0 (/tmp/bench.test)
	          1a2b40 github.com/goroce/goroce/bth.icrc (/tmp/bench.test)

	          2a2b3c github.com/goroce/goroce/internal/core/transport.(*QP).receive (/tmp/bench.test)
`

func TestBudget(t *testing.T) {
	p, data, err := parseArg("engine=x.data:0.5:0.9")
	if err != nil || data != "x.data" {
		t.Fatalf("parseArg = %v, %q", err, data)
	}
	if err := p.read(strings.NewReader(script)); err != nil {
		t.Fatal(err)
	}
	if p.nKernel != 3 || p.nUser != 2 {
		t.Fatalf("kernel %d user %d samples, want 3 and 2", p.nKernel, p.nUser)
	}
	for _, tc := range []struct {
		cat  string
		want float64
	}{
		{kCopyIn, 0.3}, {kLoopback, 0.3}, {kRecv, 0.3}, {kSend, 0},
		{uICRC, 0.25}, {uEngine, 0.25}, {uRuntime, 0},
	} {
		if got := p.perPacket(tc.cat); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %.3f µs, want %.3f", tc.cat, got, tc.want)
		}
	}
	var out bytes.Buffer
	report(&out, []*profile{p})
	if !strings.Contains(out.String(), "total (user + system)                                                 1.400") {
		t.Errorf("report:\n%s", out.String())
	}
	if strings.Contains(out.String(), kSend) {
		t.Errorf("a category no sample has is printed:\n%s", out.String())
	}
}

func TestBudgetBadInput(t *testing.T) {
	for _, arg := range []string{"x.data:1:2", "a=x.data:1", "a=x.data:one:2", "a=x.data:1:-2"} {
		if _, _, err := parseArg(arg); err == nil {
			t.Errorf("parseArg(%q) accepted", arg)
		}
	}
	p, _, _ := parseArg("a=x:1:1")
	if err := p.read(strings.NewReader("no frames here\n\n")); err == nil {
		t.Error("a profile without samples was accepted")
	}
	// Without call chains every line is a sample and no blank line parts them.
	flat := strings.Repeat("\t1a2b3c runtime.memmove (/tmp/bench.test)\n", maxChain+1)
	p, _, _ = parseArg("a=x:1:1")
	if err := p.read(strings.NewReader(flat)); err == nil || !strings.Contains(err.Error(), "perf record -g") {
		t.Errorf("a profile without call chains: %v", err)
	}
}

func TestCategories(t *testing.T) {
	for _, tc := range []struct{ sym, want string }{
		{"runtime.memmove", uCopy},
		{"__vdso_clock_gettime", uClock},
		{"github.com/goroce/goroce/link.(*reader).recv", uLink},
		{"syscall.RawSyscall6", uLink},
		{"runtime.findRunnable", uRuntime},
		{"sync.(*Mutex).Lock", uRuntime},
		{"github.com/goroce/goroce/bth.solveID", uICRC},
		{"github.com/goroce/goroce/bench.(*waiter).wait", uProgram},
		{"github.com/goroce/goroce/roce.(*memory).LocalRegion", uEngine},
		{"memcpy@plt", uOther},
	} {
		if got := userCategory(tc.sym); got != tc.want {
			t.Errorf("userCategory(%s) = %s, want %s", tc.sym, got, tc.want)
		}
	}
	k := func(syms ...string) []frame {
		var c []frame
		for _, s := range syms {
			c = append(c, frame{sym: s, kernel: true})
		}
		return append(c, frame{sym: "runtime.x"})
	}
	for _, tc := range []struct {
		chain []frame
		want  string
	}{
		{k("_copy_to_iter", "udp_recvmsg", "__sys_recvmsg"), kCopyOut},
		{k("futex_wake", "__x64_sys_futex"), kWait},
		{k("finish_task_switch.isra.0", "schedule", "exit_to_user_mode_loop"), kSched},
		{k("asm_sysvec_apic_timer_interrupt"), kOther},
		{k("ip_finish_output2", "udp_sendmsg", "__sys_sendto"), kSend},
	} {
		if got := kernelCategory(tc.chain); got != tc.want {
			t.Errorf("kernelCategory(%v) = %s, want %s", tc.chain, got, tc.want)
		}
	}
}

// roleScript has five samples, one on each kind of goroutine: a shard's send, a
// reader's receive, a program's post that sends inline, the scheduler, and an
// interrupt with no user frames.
const roleScript = `
	ffffffff81e810d9 __sys_sendmmsg ([kernel.kallsyms])
	            9dce internal/runtime/syscall/linux.Syscall6 (/tmp/bench.test)
	          3a2b3c github.com/goroce/goroce/internal/core/transport.(*shard).slice (/tmp/bench.test)
	          3a2b40 github.com/goroce/goroce/internal/core/transport.(*shard).run (/tmp/bench.test)
	          3a2b50 runtime.goexit.abi0 (/tmp/bench.test)

	ffffffff81e7f6a9 do_recvmmsg ([kernel.kallsyms])
	          4a2b3c github.com/goroce/goroce/link.(*reader).recv (/tmp/bench.test)
	          4a2b40 github.com/goroce/goroce/internal/core/transport.(*reader).loop (/tmp/bench.test)
	          4a2b50 runtime.goexit.abi0 (/tmp/bench.test)

	          5a2b3c github.com/goroce/goroce/internal/core/transport.(*requester).run (/tmp/bench.test)
	          5a2b40 github.com/goroce/goroce/internal/core/transport.(*shard).slice (/tmp/bench.test)
	          5a2b44 github.com/goroce/goroce/bench.postAll (/tmp/bench.test)
	          5a2b48 testing.(*B).launch (/tmp/bench.test)
	          5a2b50 runtime.goexit.abi0 (/tmp/bench.test)

	          6a2b3c runtime.findRunnable (/tmp/bench.test)
	          6a2b40 runtime.mcall (/tmp/bench.test)

	ffffffff81000000 asm_sysvec_apic_timer_interrupt ([kernel.kallsyms])
`

// TestRoles: each sample goes to the goroutine it ran on, a post's inline send
// to the program's; a role's µs per packet takes its share of the user and of
// the system figure; with pkts/s the report gives its cores.
func TestRoles(t *testing.T) {
	p, _, err := parseArg("e=x.data:0.4:0.9:1e6")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.read(strings.NewReader(roleScript)); err != nil {
		t.Fatal(err)
	}
	// 2 user samples (program, runtime), 3 kernel ones (shard, reader, interrupt).
	for _, tc := range []struct {
		role string
		want float64
	}{
		{rShard, 0.3}, {rReader, 0.3}, {rProgram, 0.2}, {rRuntime, 0.2}, {rKernel, 0.3},
	} {
		if got := p.rolePerPacket(tc.role); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%s: %.3f µs, want %.3f", tc.role, got, tc.want)
		}
	}
	var out bytes.Buffer
	report(&out, []*profile{p})
	if !strings.Contains(out.String(), rShard+strings.Repeat(" ", 62-len(rShard))+"       0.300 [ 0.30]") {
		t.Errorf("the role table gives no cores:\n%s", out.String())
	}
	if _, _, err := parseArg("e=x.data:0.4:0.9:0"); err == nil {
		t.Error("0 pkts/s accepted")
	}
}
