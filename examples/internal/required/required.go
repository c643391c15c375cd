// Package required checks the required string options of the examples'
// consumers, so that a missing one is a typed error naming every field at
// once, before anything connects to a broker.
package required

import (
	"errors"
	"fmt"
)

// Field is one option's name and value.
type Field struct{ Name, Value string }

// Check returns nil when every field has a value, else invalid wrapping
// one "NAME is required" error per empty field.
func Check(invalid error, fields ...Field) error {
	var missing []error
	for _, f := range fields {
		if f.Value == "" {
			missing = append(missing, fmt.Errorf("%s is required", f.Name))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", invalid, errors.Join(missing...))
}
