module github.com/goroce/goroce/cabi

go 1.26.0

require (
	github.com/goroce/goroce v0.0.0
	golang.org/x/sys v0.49.0
)

replace github.com/goroce/goroce => ../
