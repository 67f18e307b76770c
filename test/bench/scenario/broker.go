package scenario

import (
	"context"
	"fmt"

	"github.com/Azure/go-amqp"
)

// BrokerVersion dials url with go-amqp and returns the product and version
// the broker announces in its open frame (e.g. "RabbitMQ 4.0.5"), or an
// error when it announces neither.
func BrokerVersion(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	conn, err := amqp.Dial(ctx, url, &amqp.ConnOptions{ContainerID: "bench-info"})
	if err != nil {
		return "", fmt.Errorf("scenario: broker version: %w", err)
	}
	defer conn.Close()
	props := conn.Properties()
	product, _ := props["product"].(string)
	version, _ := props["version"].(string)
	switch {
	case product == "" && version == "":
		return "", fmt.Errorf("scenario: the broker announces no product or version")
	case version == "":
		return product, nil
	case product == "":
		return version, nil
	}
	return product + " " + version, nil
}
