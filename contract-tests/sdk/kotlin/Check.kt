// Calls a live mashbox through the Kotlin client openapi-generator (-g kotlin, jvm-retrofit2 with
// gson and oneOf wrappers) made from openapi.json.
//
// Usage: Check BASE_URL MODEL_ID. Prints one "ok NAME" or "FAIL NAME: why" line per check
// (contract-tests/sdk/run.mjs counts them); exits 1 when any failed.
package dev.mashbox.kotlin.check

import dev.mashbox.kotlin.apis.*
import dev.mashbox.kotlin.infrastructure.ApiClient
import dev.mashbox.kotlin.infrastructure.Serializer
import dev.mashbox.kotlin.models.*
import kotlin.system.exitProcess

var failed = 0

fun check(name: String, body: () -> Unit) {
    try {
        body()
        println("ok openapi-generator-kotlin $name")
    } catch (e: Throwable) {
        failed++
        println("FAIL openapi-generator-kotlin $name: ${e.toString().replace('\n', ' ')}")
    }
}

fun expect(ok: Boolean, what: () -> Any?) {
    if (!ok) throw AssertionError(what().toString())
}

/** A call's answer; a status other than 2xx is an error in the route's error shape. */
fun <T> retrofit2.Call<T>.answer(): T {
    val r = execute()
    if (!r.isSuccessful) throw ApiError(r.code(), r.errorBody()?.string() ?: "")
    return r.body()!!
}

class ApiError(val status: Int, val body: String) : Exception("$status $body")

/** The SSE framing: POSTs body (written by the client's gson) and hands each event's data to onData. */
fun sse(url: String, body: Any, onData: (String) -> Unit) {
    val req = java.net.http.HttpRequest.newBuilder(java.net.URI.create(url)).header("Content-Type", "application/json")
        .POST(java.net.http.HttpRequest.BodyPublishers.ofString(Serializer.gson.toJson(body))).build()
    val resp = java.net.http.HttpClient.newHttpClient().send(req, java.net.http.HttpResponse.BodyHandlers.ofLines())
    expect(resp.statusCode() == 200) { "status ${resp.statusCode()}" }
    resp.body().filter { it.startsWith("data: ") && it != "data: [DONE]" }.forEach { onData(it.removePrefix("data: ")) }
}

inline fun <reified T> decode(data: String): T = Serializer.gson.fromJson(data, T::class.java) ?: throw AssertionError("no ${T::class.simpleName}: $data")

fun main(args: Array<String>) {
    val (base, modelId) = args
    val client = ApiClient(baseUrl = "$base/")
    val question = "Name three planets."
    val user = ChatMessage(role = ChatMessage.Role.user, content = ChatMessageContent(question))
    val anthropicUser = AnthropicInputMessage(role = AnthropicInputMessage.Role.user, content = AnthropicInputMessageContent(question))
    val chat = client.createService(ChatApi::class.java)
    val messages = client.createService(MessagesApi::class.java)
    val responses = client.createService(ResponsesApi::class.java)

    check("listModels") {
        val list = client.createService(ModelsApi::class.java).listModels().answer()
        expect(list.`data`.size == 1 && list.`data`[0].id == modelId && list.`data`[0].created == 0) { list }
    }
    check("createChatCompletion") {
        val out = chat.createChatCompletion(ChatCompletionRequest(messages = listOf(user), maxTokens = 8)).answer()
        expect(out.choices.size == 1 && out.choices[0].message.content != null && out.usage.completionTokens in 1..8) { out }
    }
    check("createChatCompletion logprobs 400") {
        try {
            chat.createChatCompletion(ChatCompletionRequest(messages = listOf(user), logprobs = true)).answer()
            throw AssertionError("logprobs: true was accepted")
        } catch (e: ApiError) {
            val error = decode<OpenAIError>(e.body)
            expect(e.status == 400 && error.error.param == "logprobs") { e }
        }
    }
    check("createCompletion") {
        val out = client.createService(CompletionsApi::class.java).createCompletion(TextCompletionRequest(prompt = TextCompletionRequestPrompt("Once upon a time"), maxTokens = 8)).answer()
        expect(out.choices.size == 1 && (out.usage?.completionTokens ?: 0) >= 1) { out }
    }
    check("createMessage") {
        val out = messages.createMessage(AnthropicMessagesRequest(messages = listOf(anthropicUser), maxTokens = 8)).answer()
        expect(out.id.startsWith("msg_") && out.content[0].actualInstance is AnthropicTextBlock && out.usage.outputTokens >= 1) { out }
    }
    check("countMessageTokens") {
        val out = messages.countMessageTokens(AnthropicCountTokensRequest(messages = listOf(anthropicUser))).answer()
        expect(out.inputTokens > 0) { out }
    }
    check("createResponse") {
        val out = responses.createResponse(ResponsesRequest(input = ResponsesRequestInput(question), maxOutputTokens = 8)).answer()
        val last = out.output.last().actualInstance
        expect(out.id.startsWith("resp_") && last is ResponsesMessageItem && last.content.isNotEmpty()) { out }
    }

    // Streams: each data line decodes into the generated union of the route's events through the
    // client's own gson (each oneOf wrapper validates its branches), so an event schema the client
    // cannot read fails the check. Generated with the data_class template fix of run.mjs (the
    // stock validators read a required nullable enum or object without a null check).
    check("createChatCompletion stream") {
        var text = ""
        var finished = false
        sse("$base/v1/chat/completions", ChatCompletionRequest(messages = listOf(user), maxTokens = 8, stream = true)) { data ->
            val chunk = decode<ChatCompletionStreamPayload>(data).actualInstance as? ChatCompletionChunk ?: throw AssertionError("not a chunk: $data")
            for (c in chunk.choices) {
                text += c.delta.content ?: ""
                finished = finished || c.finishReason != null
            }
        }
        expect(text.isNotEmpty() && finished) { "text '$text', finished $finished" }
    }
    check("createMessage stream") {
        val kinds = mutableListOf<String>()
        var text = ""
        sse("$base/v1/messages", AnthropicMessagesRequest(messages = listOf(anthropicUser), maxTokens = 8, stream = true)) { data ->
            val event = decode<AnthropicStreamEvent>(data).actualInstance!!
            kinds += event::class.simpleName!!
            if (event is AnthropicContentBlockDeltaEvent) (event.delta.actualInstance as? AnthropicTextDelta)?.let { text += it.text }
        }
        expect(kinds.first() == "AnthropicMessageStartEvent" && kinds.last() == "AnthropicMessageStopEvent" && text.isNotEmpty()) { "$kinds '$text'" }
    }
    check("createResponse stream") {
        val kinds = mutableListOf<String>()
        var text = ""
        sse("$base/v1/responses", ResponsesRequest(input = ResponsesRequestInput(question), maxOutputTokens = 8, stream = true)) { data ->
            val event = decode<ResponsesStreamEvent>(data).actualInstance!!
            kinds += event::class.simpleName!!
            if (event is ResponsesOutputTextDeltaEvent) text += event.delta
        }
        expect(kinds.first() == "ResponsesCreatedEvent" && kinds.last() in listOf("ResponsesCompletedEvent", "ResponsesIncompleteEvent") && text.isNotEmpty()) { "$kinds '$text'" }
    }
    exitProcess(if (failed > 0) 1 else 0)
}
