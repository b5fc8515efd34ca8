package alloc

// RenameDevice replaces a device id (typically the planned id of a MIG
// instance, "<gpu>/<profile>@<start>", once the agent reports its real
// uuid) in the allocation's devices, changes, MPS pipe directories and
// process environment. It reports whether anything changed. It refuses
// (changes nothing) an id that cannot name an MPS pipe directory (see
// PipeDirectory): no id a validated inventory reports.
func (a *Allocation) RenameDevice(old, id string) bool {
	pipe, err := PipeDirectory(id)
	if err != nil {
		return false
	}
	changed := false
	for i := range a.Devices {
		d := &a.Devices[i]
		if d.Device != old {
			continue
		}
		d.Device, changed = id, true
		if d.MPS != nil {
			d.MPS.PipeDirectory = pipe
		}
	}
	for i := range a.Changes {
		if a.Changes[i].Device == old {
			a.Changes[i].Device, changed = id, true
		}
	}
	if changed {
		a.Env = processEnv(a)
	}
	return changed
}

// IsPlanned reports whether a device id names an instance that does not
// exist yet (a planned id).
func IsPlanned(id string) bool {
	for i := 0; i < len(id); i++ {
		if id[i] == '@' {
			return true
		}
	}
	return false
}
