package main

import (
	"net/netip"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/cm/gsi"
	"github.com/goroce/goroce/roce"
)

// openGSI opens a device on addr with QP1 handled by the CM's GSI agent.
func openGSI(addr netip.Addr, udpPort uint16) (*roce.Device, cm.MADConn, error) {
	dev, c, err := gsi.Open(addr, udpPort)
	if err != nil {
		return nil, nil, err
	}
	return dev, c, nil
}
