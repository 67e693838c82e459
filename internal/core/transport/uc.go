package transport

import (
	"time"

	"github.com/goroce/goroce/internal/core/verbs"
)

// ucFailed is a failed check on a UC QP, which never answers (IBA 9.7.5.2, rxe
// drop_msg): the message is dropped and the responder resynchronizes at the
// next FIRST or ONLY; a receive WR taken for it stays for the next one. Only a
// receive WR that cannot hold the message or names bad memory fails the QP
// (respFailure.ucFatal).
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

// ucFail is a UC class D responder error (a bad receive WR): the WR completes
// with status and the QP moves to ERR.
func (rs *responder) ucFail(now time.Time, status verbs.WCStatus) {
	rs.endWR(status)
	rs.q.toError(now)
}
