// Calls a live mashbox through the Rust client openapi-generator (-g rust, blocking reqwest) made
// from openapi.json, and decodes its streams into the generated event types.
//
// Usage: sdkcheck BASE_URL MODEL_ID. Prints one "ok NAME" or "FAIL NAME: why" line per check
// (contract-tests/sdk/run.mjs counts them); exits 1 when any failed.
use mashbox::apis::{chat_api, completions_api, configuration::Configuration, messages_api, models_api, responses_api, Error};
use mashbox::models::*;
use std::io::{BufRead, BufReader};

static mut FAILED: u32 = 0;

fn check(name: &str, f: impl FnOnce() -> Result<(), String>) {
    match f() {
        Ok(()) => println!("ok openapi-generator-rust {name}"),
        Err(why) => {
            unsafe { FAILED += 1 };
            println!("FAIL openapi-generator-rust {name}: {}", why.replace('\n', " "));
        }
    }
}

/// The SSE framing: POSTs body and hands each event's data to on_data until the stream ends.
fn sse(cfg: &Configuration, path: &str, body: &impl serde::Serialize, mut on_data: impl FnMut(&str) -> Result<(), String>) -> Result<(), String> {
    let resp = cfg.client.post(format!("{}{path}", cfg.base_path)).json(body).send().map_err(|e| e.to_string())?;
    if resp.status() != 200 {
        return Err(format!("status {}", resp.status()));
    }
    for line in BufReader::new(resp).lines() {
        let line = line.map_err(|e| e.to_string())?;
        if let Some(data) = line.strip_prefix("data: ") {
            if data != "[DONE]" {
                on_data(data)?;
            }
        }
    }
    Ok(())
}

fn decode<T: serde::de::DeserializeOwned>(data: &str) -> Result<T, String> {
    serde_json::from_str(data).map_err(|e| format!("{e}: {data}"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (base, model_id) = (args[1].clone(), args[2].clone());
    let mut cfg = Configuration::new();
    cfg.base_path = base;
    let question = "Name three planets.".to_string();
    let user_chat = || {
        let mut m = ChatMessage::new(chat_message::Role::User);
        m.content = Some(Some(Box::new(ChatMessageContent::String(question.clone()))));
        m
    };
    let user_anthropic = || AnthropicInputMessage::new(anthropic_input_message::Role::User, AnthropicInputMessageContent::String(question.clone()));

    check("listModels", || {
        let list = models_api::list_models(&cfg).map_err(|e| e.to_string())?;
        if list.data.len() != 1 || list.data[0].id != model_id || list.data[0].created != 0 {
            return Err(format!("{list:?}"));
        }
        Ok(())
    });

    check("createChatCompletion", || {
        let mut req = ChatCompletionRequest::new(vec![user_chat()]);
        req.max_tokens = Some(Some(8));
        let out = chat_api::create_chat_completion(&cfg, req).map_err(|e| e.to_string())?;
        let u = &out.usage;
        if out.choices.len() != 1 || out.choices[0].message.content.is_none() || u.completion_tokens < 1 || u.completion_tokens > 8 {
            return Err(format!("{out:?}"));
        }
        Ok(())
    });

    check("createChatCompletion logprobs 400", || {
        let mut req = ChatCompletionRequest::new(vec![user_chat()]);
        req.logprobs = Some(Some(true));
        match chat_api::create_chat_completion(&cfg, req) {
            Err(Error::ResponseError(r)) if r.status == 400 => match r.entity {
                Some(chat_api::CreateChatCompletionError::Status400(e)) if e.error.param.as_deref() == Some("logprobs") => Ok(()),
                other => Err(format!("error body {other:?}: {}", r.content)),
            },
            other => Err(format!("expected a 400, got {other:?}")),
        }
    });

    check("createCompletion", || {
        let mut req = TextCompletionRequest::new(TextCompletionRequestPrompt::String("Once upon a time".into()));
        req.max_tokens = Some(Some(8));
        let out = completions_api::create_completion(&cfg, req).map_err(|e| e.to_string())?;
        if out.choices.len() != 1 || out.usage.as_ref().map_or(true, |u| u.completion_tokens < 1) {
            return Err(format!("{out:?}"));
        }
        Ok(())
    });

    check("createMessage", || {
        let mut req = AnthropicMessagesRequest::new(vec![user_anthropic()]);
        req.max_tokens = Some(Some(8));
        let out = messages_api::create_message(&cfg, req, None).map_err(|e| e.to_string())?;
        match out.content.first() {
            Some(AnthropicContentBlock::AnthropicTextBlock(b)) if !b.text.is_empty() && out.id.starts_with("msg_") && out.usage.output_tokens >= 1 => Ok(()),
            _ => Err(format!("{out:?}")),
        }
    });

    check("countMessageTokens", || {
        let out = messages_api::count_message_tokens(&cfg, AnthropicCountTokensRequest::new(vec![user_anthropic()]), None).map_err(|e| e.to_string())?;
        if out.input_tokens < 1 {
            return Err(format!("{out:?}"));
        }
        Ok(())
    });

    check("createResponse", || {
        let mut req = ResponsesRequest::new(ResponsesRequestInput::String(question.clone()));
        req.max_output_tokens = Some(Some(8));
        let out = responses_api::create_response(&cfg, req).map_err(|e| e.to_string())?;
        match out.output.last() {
            Some(ResponsesOutputItem::ResponsesMessageItem(m)) if !m.content.is_empty() && out.id.starts_with("resp_") => Ok(()),
            _ => Err(format!("{out:?}")),
        }
    });

    check("createChatCompletion stream", || {
        let mut req = ChatCompletionRequest::new(vec![user_chat()]);
        req.max_tokens = Some(Some(8));
        req.stream = Some(Some(true));
        let (mut text, mut finished) = (String::new(), false);
        sse(&cfg, "/v1/chat/completions", &req, |data| match decode::<ChatCompletionStreamPayload>(data)? {
            ChatCompletionStreamPayload::ChatCompletionChunk(c) => {
                for choice in &c.choices {
                    text += choice.delta.content.clone().flatten().as_deref().unwrap_or("");
                    finished |= choice.finish_reason.is_some();
                }
                Ok(())
            }
            ChatCompletionStreamPayload::OpenAiStreamError(e) => Err(e.error.message.clone()),
        })?;
        if text.is_empty() || !finished {
            return Err(format!("text {text:?}, finished {finished}"));
        }
        Ok(())
    });

    check("createMessage stream", || {
        let mut req = AnthropicMessagesRequest::new(vec![user_anthropic()]);
        req.max_tokens = Some(Some(8));
        req.stream = Some(Some(true));
        let (mut text, mut stopped) = (String::new(), false);
        sse(&cfg, "/v1/messages", &req, |data| {
            match decode::<AnthropicStreamEvent>(data)? {
                AnthropicStreamEvent::AnthropicContentBlockDeltaEvent(e) => {
                    if let AnthropicContentBlockDelta::AnthropicTextDelta(d) = *e.delta {
                        text += &d.text;
                    }
                }
                AnthropicStreamEvent::AnthropicMessageStopEvent(_) => stopped = true,
                AnthropicStreamEvent::AnthropicErrorEvent(e) => return Err(e.error.message.clone()),
                _ => {}
            }
            Ok(())
        })?;
        if text.is_empty() || !stopped {
            return Err(format!("text {text:?}, message_stop {stopped}"));
        }
        Ok(())
    });

    check("createResponse stream", || {
        let mut req = ResponsesRequest::new(ResponsesRequestInput::String(question.clone()));
        req.max_output_tokens = Some(Some(8));
        req.stream = Some(Some(true));
        let (mut text, mut done) = (String::new(), false);
        sse(&cfg, "/v1/responses", &req, |data| {
            match decode::<ResponsesStreamEvent>(data)? {
                ResponsesStreamEvent::ResponsesOutputTextDeltaEvent(e) => text += &e.delta,
                ResponsesStreamEvent::ResponsesCompletedEvent(_) | ResponsesStreamEvent::ResponsesIncompleteEvent(_) => done = true,
                ResponsesStreamEvent::ResponsesErrorEvent(e) => return Err(e.message.clone()),
                _ => {}
            }
            Ok(())
        })?;
        if text.is_empty() || !done {
            return Err(format!("text {text:?}, completed {done}"));
        }
        Ok(())
    });

    if unsafe { FAILED } > 0 {
        std::process::exit(1);
    }
}
