//go:build !race

package link

func raceReleaseIO() {}

func raceAcquireIO() {}
