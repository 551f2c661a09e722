package client

import "encoding/pem"

// nextPEM returns the DER of the next CERTIFICATE block and the rest.
func nextPEM(b []byte) (der, rest []byte) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, nil
		}
		if block.Type == "CERTIFICATE" {
			return block.Bytes, b
		}
	}
}
