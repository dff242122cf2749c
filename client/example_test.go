package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/airlockhq/airlock/client"
)

// A Go program that shares one airlock server: the note is saved once per
// piece of work, however often it is asked. (AIRLOCK_URL and AIRLOCK_TOKEN
// configure the client.)
func Example() {
	c := client.New(nil)
	answer, err := c.Do(context.Background(), "save_note", map[string]string{"record_id": "WD-1", "text": "checked"}, "run-42",
		func(ctx context.Context) (any, error) {
			return map[string]string{"note": "N-1"}, nil // the work itself
		})
	if err != nil {
		log.Fatal(err) // refused: nothing ran
	}
	fmt.Println(answer.Status, answer.Repeat)
}
