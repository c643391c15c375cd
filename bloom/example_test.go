package bloom_test

import (
	"errors"
	"fmt"

	"github.com/oncekv/oncekv/bloom"
)

// Hash a key once with Sum64, then ask each window's filter; only a
// "maybe" needs the exact look-up.
func ExampleFilter() {
	f, err := bloom.New(10_000, 0.01)
	if err != nil {
		panic(err)
	}
	seen := bloom.Sum64([]byte("orders.charge/order-1"))
	f.Add(seen)

	fresh := bloom.Sum64([]byte("orders.charge/order-2"))
	fmt.Println(f.MayContain(seen))
	fmt.Println(f.MayContain(fresh))
	// Output:
	// true
	// false
}

// A sealed window's filter is persisted so that reopening the store does
// not rescan its keys. A damaged encoding is an error, never a wrong filter.
func ExampleDecode() {
	f, _ := bloom.New(1000, 0.01)
	f.Add(bloom.Sum64([]byte("order-1")))

	data, _ := f.MarshalBinary()
	g, err := bloom.Decode(data)
	fmt.Println(g.MayContain(bloom.Sum64([]byte("order-1"))), err)

	data[40] ^= 1
	_, err = bloom.Decode(data)
	fmt.Println(errors.Is(err, bloom.ErrCorrupt))
	// Output:
	// true <nil>
	// true
}
