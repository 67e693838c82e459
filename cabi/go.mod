module github.com/goroce/goroce/cabi

go 1.26.0

require (
	github.com/goroce/goroce v0.0.0
	golang.org/x/sys v0.49.0
)

require github.com/pborman/getopt/v2 v2.2.0 // indirect

replace github.com/goroce/goroce => ../
