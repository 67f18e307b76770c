package amqpscan_test

import (
	"errors"
	"fmt"

	"github.com/amqpactor/amqpactor/internal/amqpscan"
)

func ExampleCheck() {
	// A message whose footer has a list as a key: go-amqp would panic
	// decoding it.
	payload := []byte{
		0x00, 0x53, 0x75, 0xa0, 0x02, 'h', 'i', // data "hi"
		0x00, 0x53, 0x78, // footer
		0xc1, 0x07, 0x02, // map8 of one pair
		0xc0, 0x03, 0x01, 0x52, 0x01, // key: list8 [smalluint 1]
		0x41, // value: true
	}
	err := amqpscan.Check(payload, amqpscan.Limits{MaxSize: 1 << 20})
	var e *amqpscan.Error
	if errors.As(err, &e) {
		fmt.Printf("poison at byte %d: %s\n", e.Offset, e.Reason)
	}

	// The same message without its footer is fine.
	fmt.Println(amqpscan.Check(payload[:7], amqpscan.Limits{}))
	// Output:
	// poison at byte 13: list key in footer
	// <nil>
}
