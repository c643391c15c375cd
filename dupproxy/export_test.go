package dupproxy

// Compare compares two answers of the given statuses and bodies, with
// masks, as a copy's answer is compared with its original's.
func Compare(statusA int, bodyA string, statusB int, bodyB string, masks []string) string {
	var ms []mask
	for _, m := range masks {
		pm, err := parseMask(m)
		if err != nil {
			panic(err)
		}
		ms = append(ms, pm)
	}
	return compare(&answer{status: statusA, body: []byte(bodyA)}, &answer{status: statusB, body: []byte(bodyB)}, nil, ms)
}
