// Calls a live mashbox through the Go client openapi-generator made from openapi.json.
//
// Usage: sdkcheck BASE_URL MODEL_ID. Prints one "ok NAME" or "FAIL NAME: why" line per check
// (contract-tests/sdk/run.mjs counts them); exits 1 when any failed.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"

	mashbox "github.com/mashbox/sdk-go/mashbox"
)

var failed = 0

func check(name string, fn func() error) {
	if err := fn(); err != nil {
		failed++
		fmt.Printf("FAIL openapi-generator-go %s: %s\n", name, strings.ReplaceAll(err.Error(), "\n", " "))
		return
	}
	fmt.Printf("ok openapi-generator-go %s\n", name)
}

// apiError adds the answer's body (the error shape of the route) to a failed call's error.
func apiError(err error) error {
	if e, ok := err.(*mashbox.GenericOpenAPIError); ok {
		return fmt.Errorf("%s: %s", e.Error(), string(e.Body()))
	}
	return err
}

// sse is the SSE framing: it POSTs body and hands each event's data to onData until the stream ends.
func sse(url string, body any, onData func([]byte) error) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok && data != "[DONE]" {
			if err := onData([]byte(data)); err != nil {
				return err
			}
		}
	}
	return lines.Err()
}

func main() {
	base, modelID := os.Args[1], os.Args[2]
	cfg := mashbox.NewConfiguration()
	cfg.Servers = mashbox.ServerConfigurations{{URL: base}}
	client := mashbox.NewAPIClient(cfg)
	ctx := context.Background()
	question := "Name three planets."

	check("listModels", func() error {
		list, _, err := client.ModelsAPI.ListModels(ctx).Execute()
		if err != nil {
			return apiError(err)
		}
		if len(list.Data) != 1 || list.Data[0].Id != modelID {
			return fmt.Errorf("models %+v, want one with id %s", list.Data, modelID)
		}
		return nil
	})

	check("createChatCompletion", func() error {
		msg := mashbox.NewChatMessage("user")
		msg.SetContent(mashbox.StringAsChatMessageContent(&question))
		req := mashbox.NewChatCompletionRequest([]mashbox.ChatMessage{*msg})
		req.SetMaxTokens(8)
		out, _, err := client.ChatAPI.CreateChatCompletion(ctx).ChatCompletionRequest(*req).Execute()
		if err != nil {
			return apiError(err)
		}
		if out.Object != "chat.completion" || len(out.Choices) != 1 || out.Choices[0].Message.Content.Get() == nil {
			return fmt.Errorf("unexpected answer %+v", out)
		}
		if u := out.Usage; u.CompletionTokens < 1 || u.CompletionTokens > 8 || u.TotalTokens != u.PromptTokens+u.CompletionTokens {
			return fmt.Errorf("usage %+v", u)
		}
		return nil
	})

	check("createChatCompletion logprobs 400", func() error {
		msg := mashbox.NewChatMessage("user")
		msg.SetContent(mashbox.StringAsChatMessageContent(&question))
		req := mashbox.NewChatCompletionRequest([]mashbox.ChatMessage{*msg})
		req.SetLogprobs(true)
		_, resp, err := client.ChatAPI.CreateChatCompletion(ctx).ChatCompletionRequest(*req).Execute()
		e, isAPIError := err.(*mashbox.GenericOpenAPIError)
		if !isAPIError || resp == nil || resp.StatusCode != 400 {
			return fmt.Errorf("expected a 400, got %v", err)
		}
		body, isOpenAIError := e.Model().(mashbox.OpenAIError)
		if !isOpenAIError || body.Error.Param.Get() == nil || *body.Error.Param.Get() != "logprobs" {
			return fmt.Errorf("error body %s", string(e.Body()))
		}
		return nil
	})

	check("createCompletion", func() error {
		prompt := "Once upon a time"
		req := mashbox.NewTextCompletionRequest(mashbox.StringAsTextCompletionRequestPrompt(&prompt))
		req.SetMaxTokens(8)
		out, _, err := client.CompletionsAPI.CreateCompletion(ctx).TextCompletionRequest(*req).Execute()
		if err != nil {
			return apiError(err)
		}
		if out.Object != "text_completion" || len(out.Choices) != 1 || out.Usage == nil || out.Usage.CompletionTokens < 1 {
			return fmt.Errorf("unexpected answer %+v", out)
		}
		return nil
	})

	user := mashbox.NewAnthropicInputMessage("user", mashbox.StringAsAnthropicInputMessageContent(&question))

	check("createMessage", func() error {
		req := mashbox.NewAnthropicMessagesRequest([]mashbox.AnthropicInputMessage{*user})
		req.SetMaxTokens(8)
		out, _, err := client.MessagesAPI.CreateMessage(ctx).AnthropicMessagesRequest(*req).Execute()
		if err != nil {
			return apiError(err)
		}
		if !strings.HasPrefix(out.Id, "msg_") || len(out.Content) == 0 || out.Content[0].AnthropicTextBlock == nil {
			return fmt.Errorf("unexpected answer %+v", out)
		}
		if out.Usage.OutputTokens < 1 || out.Usage.OutputTokens > 8 {
			return fmt.Errorf("usage %+v", out.Usage)
		}
		return nil
	})

	check("countMessageTokens", func() error {
		req := mashbox.NewAnthropicCountTokensRequest([]mashbox.AnthropicInputMessage{*user})
		out, _, err := client.MessagesAPI.CountMessageTokens(ctx).AnthropicCountTokensRequest(*req).Execute()
		if err != nil {
			return apiError(err)
		}
		if out.InputTokens < 1 {
			return fmt.Errorf("input_tokens %d", out.InputTokens)
		}
		return nil
	})

	check("createResponse", func() error {
		req := mashbox.NewResponsesRequest(mashbox.StringAsResponsesRequestInput(&question))
		req.SetMaxOutputTokens(8)
		out, _, err := client.ResponsesAPI.CreateResponse(ctx).ResponsesRequest(*req).Execute()
		if err != nil {
			return apiError(err)
		}
		last := out.Output[len(out.Output)-1]
		if !strings.HasPrefix(out.Id, "resp_") || last.ResponsesMessageItem == nil || len(last.ResponsesMessageItem.Content) == 0 {
			return fmt.Errorf("unexpected answer %+v", out)
		}
		if u := out.Usage.Get(); u == nil || u.OutputTokens < 1 || u.OutputTokens > 8 {
			return fmt.Errorf("usage %+v", out.Usage)
		}
		return nil
	})

	// Streams: each data line decodes into the generated union of the route's events (one
	// branch pointer is set), so an event schema the client cannot read fails the check.
	check("createChatCompletion stream", func() error {
		msg := mashbox.NewChatMessage("user")
		msg.SetContent(mashbox.StringAsChatMessageContent(&question))
		req := mashbox.NewChatCompletionRequest([]mashbox.ChatMessage{*msg})
		req.SetMaxTokens(8)
		req.SetStream(true)
		text, finished := "", false
		err := sse(base+"/v1/chat/completions", req, func(data []byte) error {
			var payload mashbox.ChatCompletionStreamPayload
			if err := json.Unmarshal(data, &payload); err != nil || payload.ChatCompletionChunk == nil {
				return fmt.Errorf("%v: %s", err, data)
			}
			for _, c := range payload.ChatCompletionChunk.Choices {
				if c.Delta.Content.Get() != nil {
					text += *c.Delta.Content.Get()
				}
				finished = finished || c.FinishReason.Get() != nil
			}
			return nil
		})
		if err == nil && (text == "" || !finished) {
			err = fmt.Errorf("text %q, finished %v", text, finished)
		}
		return err
	})

	check("createMessage stream", func() error {
		req := mashbox.NewAnthropicMessagesRequest([]mashbox.AnthropicInputMessage{*user})
		req.SetMaxTokens(8)
		req.SetStream(true)
		text, stopped := "", false
		err := sse(base+"/v1/messages", req, func(data []byte) error {
			var event mashbox.AnthropicStreamEvent
			if err := json.Unmarshal(data, &event); err != nil {
				return fmt.Errorf("%v: %s", err, data)
			}
			if d := event.AnthropicContentBlockDeltaEvent; d != nil && d.Delta.AnthropicTextDelta != nil {
				text += d.Delta.AnthropicTextDelta.Text
			}
			stopped = stopped || event.AnthropicMessageStopEvent != nil
			return nil
		})
		if err == nil && (text == "" || !stopped) {
			err = fmt.Errorf("text %q, message_stop %v", text, stopped)
		}
		return err
	})

	check("createResponse stream", func() error {
		req := mashbox.NewResponsesRequest(mashbox.StringAsResponsesRequestInput(&question))
		req.SetMaxOutputTokens(8)
		req.SetStream(true)
		text, done := "", false
		err := sse(base+"/v1/responses", req, func(data []byte) error {
			var event mashbox.ResponsesStreamEvent
			if err := json.Unmarshal(data, &event); err != nil {
				return fmt.Errorf("%v: %s", err, data)
			}
			if d := event.ResponsesOutputTextDeltaEvent; d != nil {
				text += d.Delta
			}
			done = done || event.ResponsesCompletedEvent != nil || event.ResponsesIncompleteEvent != nil
			return nil
		})
		if err == nil && (text == "" || !done) {
			err = fmt.Errorf("text %q, completed %v", text, done)
		}
		return err
	})

	if failed > 0 {
		os.Exit(1)
	}
}
