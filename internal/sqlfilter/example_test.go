package sqlfilter_test

import (
	"fmt"

	"github.com/amqpactor/amqpactor/internal/sqlfilter"
	"github.com/amqpactor/amqpactor/messages"
)

func Example() {
	f, err := sqlfilter.Parse("p.subject LIKE 'order.%' AND region IN ('eu', 'us') AND h.priority > 4")
	if err != nil {
		panic(err)
	}
	m := &messages.Message{Subject: "order.created", Priority: 7, Headers: map[string]any{"region": "eu"}}
	fmt.Println(f.Match(m))
	m.Headers["region"] = "apac"
	fmt.Println(f.Match(m))

	_, err = sqlfilter.Parse("region = 'eu' and amount > 10")
	fmt.Println(err)
	// Output:
	// true
	// false
	// sql filter: column 15: "and" is a reserved word: write operators in upper case (AND), and a name that is a reserved word in brackets ([and]), near "region = 'eu' and amount > 10"
}
