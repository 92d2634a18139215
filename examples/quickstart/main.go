// Command quickstart sends a message to a StrataMQ broker and receives it
// with the official RocketMQ Go client (the README's example; a test
// checks that the README shows this file as it is).
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

func main() {
	ns := primitive.NewPassthroughResolver([]string{"127.0.0.1:9876"})

	p, err := rocketmq.NewProducer(producer.WithNsResolver(ns), producer.WithGroupName("quickstart"))
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	defer p.Shutdown()
	res, err := p.SendSync(context.Background(), primitive.NewMessage("TopicA", []byte("hello")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("sent", res.MsgID, "to queue", res.MessageQueue.QueueId, "at offset", res.QueueOffset)

	got := make(chan string, 1)
	c, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(ns), consumer.WithGroupName("quickstart"),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		log.Fatal(err)
	}
	err = c.Subscribe("TopicA", consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			select {
			case got <- string(m.Body):
			default:
			}
		}
		return consumer.ConsumeSuccess, nil // acknowledged: the group's offset moves past them
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Start(); err != nil {
		log.Fatal(err)
	}
	defer c.Shutdown()
	select {
	case body := <-got:
		fmt.Println("received", body)
	case <-time.After(30 * time.Second):
		log.Fatal("nothing received within 30s")
	}
}
