package outbox

import (
	"testing"

	"github.com/silas-gateway/silas/core"
	"github.com/silas-gateway/silas/core/audit"
)

// Jobs handed to a lane are delivered oldest first even when commits of one
// conversation land out of id order; a job whose id never arrived is read
// back from the database like any other.
func TestLaneAdd(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		batches [][]int64 // ids handed over per commit (0: id unknown)
		n       []int     // jobs of each commit the lane must read
		mem     []int64
		expect  int
		reading bool
	}{
		{"in order", [][]int64{{1, 2}, {3}}, []int{0, 0}, []int64{1, 2, 3}, 0, false},
		{"commits out of id order", [][]int64{{5, 6}, {3, 4}}, []int{0, 0}, []int64{3, 4, 5, 6}, 0, false},
		{"an id that never arrived is read", [][]int64{{1, 0}}, []int{0}, []int64{1}, 1, true},
		{"edits are read", [][]int64{{1}}, []int{2}, []int64{1}, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &lane{}
			for i, b := range tt.batches {
				var jobs []core.OutboxJob
				for _, id := range b {
					jobs = append(jobs, core.OutboxJob{ID: id})
				}
				l.add(jobs, tt.n[i])
			}
			var ids []int64
			for _, j := range l.mem {
				ids = append(ids, j.ID)
			}
			if len(ids) != len(tt.mem) {
				t.Fatalf("mem = %v, want %v", ids, tt.mem)
			}
			for i := range ids {
				if ids[i] != tt.mem[i] {
					t.Fatalf("mem = %v, want %v", ids, tt.mem)
				}
			}
			if l.expect != tt.expect || l.reading() != tt.reading {
				t.Fatalf("expect = %d, reading = %v; want %d, %v", l.expect, l.reading(), tt.expect, tt.reading)
			}
		})
	}
	l := &lane{}
	if l.add(nil, -1); !l.reading() {
		t.Fatal("an unknown count (the recovery scan) does not make the lane read")
	}
}

func TestMessageKind(t *testing.T) {
	t.Parallel()
	if messageKind(core.OpSend) != audit.KindMessageSend || messageKind(core.OpUpdate) != audit.KindMessageUpdate {
		t.Fatal("delivery audit kinds changed")
	}
}
