// Calls a live mashbox through a Java client openapi-generator (-g java) made from openapi.json,
// and decodes its streams into the generated event types. One source for the two libraries:
// run.mjs fills in the package (__PKG__), the label (__LABEL__) and how the library's own JSON
// codec reads and writes a value (__DECODE__, __ENCODE__).
//
// Usage: java Check BASE_URL MODEL_ID. Prints one "ok NAME" or "FAIL NAME: why" line per check
// (contract-tests/sdk/run.mjs counts them); exits 1 when any failed.
package __PKG__.check;

import __PKG__.ApiClient;
import __PKG__.ApiException;
import __PKG__.JSON;
import __PKG__.api.*;
import __PKG__.model.*;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.function.Consumer;

public class Check {
  static int failed = 0;
  static ApiClient client;

  interface Body { void run() throws Exception; }

  static void check(String name, Body body) {
    try {
      body.run();
      System.out.println("ok __LABEL__ " + name);
    } catch (Throwable e) {
      failed++;
      String why = e instanceof ApiException ? ((ApiException) e).getCode() + " " + ((ApiException) e).getResponseBody() + " " + e.getMessage() + " " + e.getCause() : e.toString();
      System.out.println("FAIL __LABEL__ " + name + ": " + why.replace('\n', ' '));
    }
  }

  static void expect(boolean ok, Object what) {
    if (!ok) throw new AssertionError(String.valueOf(what));
  }

  static <T> T decode(String json, Class<T> type) throws Exception {
    return __DECODE__;
  }

  static String encode(Object value) throws Exception {
    return __ENCODE__;
  }

  /** The SSE framing: POSTs body and hands each event's data to onData until the stream ends. */
  static void sse(String url, Object body, Consumer<String> onData) throws Exception {
    HttpRequest req = HttpRequest.newBuilder(URI.create(url)).header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(encode(body))).build();
    HttpResponse<java.util.stream.Stream<String>> resp = HttpClient.newHttpClient().send(req, HttpResponse.BodyHandlers.ofLines());
    expect(resp.statusCode() == 200, "status " + resp.statusCode());
    resp.body().filter(l -> l.startsWith("data: ") && !l.equals("data: [DONE]")).forEach(l -> onData.accept(l.substring(6)));
  }

  /** decode() for a lambda: a payload that does not decode fails the check. */
  static <T> T event(String data, Class<T> type) {
    try {
      return decode(data, type);
    } catch (Exception e) {
      throw new AssertionError(type.getSimpleName() + ": " + e + ": " + data);
    }
  }

  public static void main(String[] args) throws Exception {
    String base = args[0], modelId = args[1];
    client = new ApiClient();
    __BASE__;
    String question = "Name three planets.";
    ChatMessage user = new ChatMessage().role(ChatMessage.RoleEnum.USER).content(new ChatMessageContent(question));
    AnthropicInputMessage anthropicUser = new AnthropicInputMessage().role(AnthropicInputMessage.RoleEnum.USER).content(new AnthropicInputMessageContent(question));

    check("listModels", () -> {
      OpenAIModelList list = new ModelsApi(client).listModels();
      expect(list.getData().size() == 1 && list.getData().get(0).getId().equals(modelId) && list.getData().get(0).getCreated() == 0, list);
    });
    check("createChatCompletion", () -> {
      ChatCompletion out = new ChatApi(client).createChatCompletion(new ChatCompletionRequest().messages(List.of(user)).maxTokens(8));
      expect(out.getChoices().size() == 1 && out.getChoices().get(0).getMessage().getContent() != null, out);
      expect(out.getUsage().getCompletionTokens() >= 1 && out.getUsage().getCompletionTokens() <= 8, out.getUsage());
    });
    check("createChatCompletion logprobs 400", () -> {
      try {
        new ChatApi(client).createChatCompletion(new ChatCompletionRequest().messages(List.of(user)).logprobs(true));
        throw new AssertionError("logprobs: true was accepted");
      } catch (ApiException e) {
        OpenAIError error = decode(e.getResponseBody(), OpenAIError.class);
        expect(e.getCode() == 400 && "logprobs".equals(error.getError().getParam()), e.getCode() + " " + e.getResponseBody());
      }
    });
    check("createCompletion", () -> {
      TextCompletion out = new CompletionsApi(client).createCompletion(new TextCompletionRequest().prompt(new TextCompletionRequestPrompt("Once upon a time")).maxTokens(8));
      expect(out.getChoices().size() == 1 && out.getUsage().getCompletionTokens() >= 1, out);
    });
    check("createMessage", () -> {
      AnthropicMessage out = new MessagesApi(client).createMessage(new AnthropicMessagesRequest().messages(List.of(anthropicUser)).maxTokens(8), null);
      expect(out.getId().startsWith("msg_") && out.getContent().get(0).getActualInstance() instanceof AnthropicTextBlock, out);
      expect(out.getUsage().getOutputTokens() >= 1 && out.getUsage().getCacheCreationInputTokens() == 0, out.getUsage());
    });
    check("countMessageTokens", () -> {
      AnthropicTokenCount out = new MessagesApi(client).countMessageTokens(new AnthropicCountTokensRequest().messages(List.of(anthropicUser)), null);
      expect(out.getInputTokens() > 0, out);
    });
    check("createResponse", () -> {
      ResponsesResponse out = new ResponsesApi(client).createResponse(new ResponsesRequest().input(new ResponsesRequestInput(question)).maxOutputTokens(8));
      Object last = out.getOutput().get(out.getOutput().size() - 1).getActualInstance();
      expect(out.getId().startsWith("resp_") && last instanceof ResponsesMessageItem && !((ResponsesMessageItem) last).getContent().isEmpty(), out);
    });

    check("createChatCompletion stream", () -> {
      StringBuilder text = new StringBuilder();
      boolean[] finished = {false};
      sse(base + "/v1/chat/completions", new ChatCompletionRequest().messages(List.of(user)).maxTokens(8).stream(true), data -> {
        // A chat data line has no event name: it is a chunk, or {"error": ...} (OpenAIStreamError).
        // Jackson (native) matches an error shape on any object, so the key decides.
        if (data.startsWith("{\"error\"")) throw new AssertionError(event(data, OpenAIStreamError.class).getError().getMessage());
        for (ChatCompletionChunkChoicesInner c : event(data, ChatCompletionChunk.class).getChoices()) {
          if (c.getDelta().getContent() != null) text.append(c.getDelta().getContent());
          finished[0] |= c.getFinishReason() != null;
        }
      });
      expect(text.length() > 0 && finished[0], text + " finished " + finished[0]);
    });
    check("createMessage stream", () -> {
      StringBuilder text = new StringBuilder();
      boolean[] stopped = {false};
      sse(base + "/v1/messages", new AnthropicMessagesRequest().messages(List.of(anthropicUser)).maxTokens(8).stream(true), data -> {
        Object e = event(data, AnthropicStreamEvent.class).getActualInstance();
        Object delta = e instanceof AnthropicContentBlockDeltaEvent ? ((AnthropicContentBlockDeltaEvent) e).getDelta().getActualInstance() : null;
        if (delta instanceof AnthropicTextDelta) text.append(((AnthropicTextDelta) delta).getText());
        if (e instanceof AnthropicMessageStopEvent) stopped[0] = true;
        if (e instanceof AnthropicErrorEvent) throw new AssertionError(data);
      });
      expect(text.length() > 0 && stopped[0], text + " message_stop " + stopped[0]);
    });
    check("createResponse stream", () -> {
      StringBuilder text = new StringBuilder();
      boolean[] done = {false};
      sse(base + "/v1/responses", new ResponsesRequest().input(new ResponsesRequestInput(question)).maxOutputTokens(8).stream(true), data -> {
        Object e = event(data, ResponsesStreamEvent.class).getActualInstance();
        if (e instanceof ResponsesOutputTextDeltaEvent) text.append(((ResponsesOutputTextDeltaEvent) e).getDelta());
        if (e instanceof ResponsesCompletedEvent || e instanceof ResponsesIncompleteEvent) done[0] = true;
        if (e instanceof ResponsesErrorEvent) throw new AssertionError(data);
      });
      expect(text.length() > 0 && done[0], text + " completed " + done[0]);
    });
    System.exit(failed > 0 ? 1 : 0);
  }
}
