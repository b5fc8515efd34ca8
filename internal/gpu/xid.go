package gpu

import "fmt"

// XID is what gpuslice knows about one NVIDIA XID error code.
type XID struct {
	// Name says what the driver reports (NVIDIA's XID catalog, shortened).
	Name string
	// Fatal XIDs make the GPU unhealthy: its memory or its link to the
	// host cannot be trusted until the GPU is reset. Work on it must
	// leave (the DRA driver taints its devices NoExecute).
	Fatal bool
}

// XIDs is the one table of XIDs: the device layers (nvml, fake) mark a GPU
// unhealthy on a fatal one and the DRA driver's device taints follow it.
// An XID missing here is not fatal.
//
//	XID  fatal  meaning
//	13   no     graphics engine exception (an application fault)
//	31   no     GPU memory page fault (an application fault)
//	43   no     GPU stopped processing (an application fault)
//	48   yes    double-bit ECC error
//	63   no     ECC page retirement / row remapping recorded (reset pending)
//	64   no     ECC page retirement / row remapping failure
//	74   no     NVLink error
//	79   yes    GPU has fallen off the bus
//	92   no     high single-bit ECC error rate
//	94   yes    contained ECC error
//	95   yes    uncontained ECC error
//	119  yes    GSP RPC timeout
//	120  yes    GSP error
var XIDs = map[int]XID{
	13:  {Name: "graphics engine exception"},
	31:  {Name: "GPU memory page fault"},
	43:  {Name: "GPU stopped processing"},
	48:  {Name: "double-bit ECC error", Fatal: true},
	63:  {Name: "ECC page retirement or row remapping recorded"},
	64:  {Name: "ECC page retirement or row remapping failure"},
	74:  {Name: "NVLink error"},
	79:  {Name: "GPU has fallen off the bus", Fatal: true},
	92:  {Name: "high single-bit ECC error rate"},
	94:  {Name: "contained ECC error", Fatal: true},
	95:  {Name: "uncontained ECC error", Fatal: true},
	119: {Name: "GSP RPC timeout", Fatal: true},
	120: {Name: "GSP error", Fatal: true},
}

// FatalXID reports whether an XID makes a GPU unhealthy (XIDs).
func FatalXID(xid int) bool { return XIDs[xid].Fatal }

// XIDName describes an XID ("XID error" when XIDs does not know it).
func XIDName(xid int) string {
	if x, ok := XIDs[xid]; ok {
		return x.Name
	}
	return fmt.Sprintf("XID error %d", xid)
}
