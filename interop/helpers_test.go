package interop

import "strings"

// containsConnectFailure reports whether a stock pingpong client failed only because
// nothing listened on the TCP port yet.
func containsConnectFailure(out string) bool {
	return strings.Contains(out, "Couldn't connect to")
}
