package link

// ICRCv4 lets the external tests (tap_test.go) verify captured ICRCs.
var ICRCv4 = icrcV4
