package srq

import (
	"syscall"
	"testing"

	"github.com/goroce/goroce/internal/core/verbs"
)

// TestErrno is the table of every errno each verb returns.
func TestErrno(t *testing.T) {
	noResize := Caps{MaxWR: 64, MaxSGE: 4}
	type setup func(t *testing.T, q *Queue)
	full := func(t *testing.T, q *Queue) { post(t, q, seq(1, 8)...) }
	failed := func(t *testing.T, q *Queue) { q.SetError() }
	closed := func(t *testing.T, q *Queue) {
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
	attached := func(t *testing.T, q *Queue) { q.Attach() }
	postErr := func(wrs ...verbs.RecvWR) func(q *Queue) error {
		return func(q *Queue) error { _, err := q.PostRecv(wrs); return err }
	}
	modify := func(a verbs.SRQAttr, m verbs.SRQAttrMask) func(q *Queue) error {
		return func(q *Queue) error { return q.Modify(&a, m) }
	}
	query := func(q *Queue) error { _, err := q.Query(); return err }
	for _, tc := range []struct {
		name  string
		caps  Caps
		setup setup
		verb  func(q *Queue) error
		want  syscall.Errno
	}{
		{"ibv_post_srq_recv/too many SGEs", testCaps, nil, postErr(wr(1, 2)), syscall.EINVAL},
		{"ibv_post_srq_recv/full", testCaps, full, postErr(wr(1, 1)), syscall.ENOMEM},
		{"ibv_post_srq_recv/error state", testCaps, failed, postErr(wr(1, 1)), syscall.EIO},
		{"ibv_post_srq_recv/destroyed", testCaps, closed, postErr(wr(1, 1)), syscall.EINVAL},
		{"ibv_post_srq_recv/ok", testCaps, nil, postErr(wr(1, 1)), 0},
		{"ibv_modify_srq/nil attr", testCaps, nil, func(q *Queue) error { return q.Modify(nil, verbs.SRQLimit) }, syscall.EINVAL},
		{"ibv_modify_srq/unknown mask", testCaps, nil, modify(verbs.SRQAttr{}, 1<<5), syscall.EINVAL},
		{"ibv_modify_srq/max_wr zero", testCaps, nil, modify(verbs.SRQAttr{MaxWR: 0}, verbs.SRQMaxWR), syscall.EINVAL},
		{"ibv_modify_srq/max_wr above device", testCaps, nil, modify(verbs.SRQAttr{MaxWR: 65}, verbs.SRQMaxWR), syscall.EINVAL},
		{"ibv_modify_srq/max_wr below outstanding", testCaps, full, modify(verbs.SRQAttr{MaxWR: 7}, verbs.SRQMaxWR), syscall.EINVAL},
		{"ibv_modify_srq/resize unsupported", noResize, nil, modify(verbs.SRQAttr{MaxWR: 16}, verbs.SRQMaxWR), syscall.ENOSYS},
		{"ibv_modify_srq/limit above max_wr", testCaps, nil, modify(verbs.SRQAttr{Limit: 9}, verbs.SRQLimit), syscall.EINVAL},
		{"ibv_modify_srq/error state", testCaps, failed, modify(verbs.SRQAttr{Limit: 1}, verbs.SRQLimit), syscall.EIO},
		{"ibv_modify_srq/destroyed", testCaps, closed, modify(verbs.SRQAttr{Limit: 1}, verbs.SRQLimit), syscall.EINVAL},
		{"ibv_modify_srq/ok", testCaps, full, modify(verbs.SRQAttr{MaxWR: 9, Limit: 2}, verbs.SRQMaxWR|verbs.SRQLimit), 0},
		{"ibv_query_srq/error state", testCaps, failed, query, syscall.EIO},
		{"ibv_query_srq/destroyed", testCaps, closed, query, syscall.EINVAL},
		{"ibv_query_srq/ok", testCaps, nil, query, 0},
		{"ibv_destroy_srq/attached", testCaps, attached, (*Queue).Close, syscall.EBUSY},
		{"ibv_destroy_srq/twice", testCaps, closed, (*Queue).Close, syscall.EINVAL},
		{"ibv_destroy_srq/error state", testCaps, failed, (*Queue).Close, 0},
		{"ibv_create_srq/max_wr zero", testCaps, nil, func(*Queue) error { _, err := New(&verbs.SRQAttr{MaxSGE: 1}, testCaps); return err }, syscall.EINVAL},
		{"ibv_create_srq/max_sge above device", testCaps, nil, func(*Queue) error { _, err := New(&verbs.SRQAttr{MaxWR: 1, MaxSGE: 5}, testCaps); return err }, syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, 8, 1, tc.caps)
			if tc.setup != nil {
				tc.setup(t, q)
			}
			err := tc.verb(q)
			if tc.want == 0 {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			wantErrno(t, err, tc.want)
		})
	}
}
