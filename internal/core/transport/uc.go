package transport

import (
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// ucFailed is what a failed check does on a UC QP, which never answers (IBA
// 9.7.5.2.x, rxe drop_msg): the message is dropped and the responder
// resynchronizes at the next FIRST or ONLY. A receive WR taken for the
// dropped SEND stays with the QP for the next message. Only a receive WR
// that cannot hold the message or names bad memory fails the QP (ucFail).
func (rs *responder) ucFailed(now time.Time, err respErr) {
	if f := respFailure[err]; f.ucFatal {
		rs.ucFail(now, f.status)
		return
	}
	rs.ucAbandon()
	rs.dropping = true
}

// ucAbandon forgets a partial SEND or WRITE; bytes already placed stay.
func (rs *responder) ucAbandon() {
	rs.opcode = noOpcode
	rs.off = 0
	rs.woff, rs.wlen = 0, 0
}

// ucFail is an IBA class D responder error on a UC QP (the receive WR
// cannot hold the message or names bad memory): the WR completes with
// status and the QP moves to ERR.
func (rs *responder) ucFail(now time.Time, status verbs.WCStatus) {
	rs.endWR(status)
	rs.q.toError(now)
}
