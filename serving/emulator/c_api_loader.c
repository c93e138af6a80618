/* Loads a SavedModel through TensorFlow's C API and serves requests on stdin/stdout.
 *
 * Built by loader_build.py (beside it, for c_api_loader.py) with gcc against the headers and
 * libraries of the pip `tensorflow` wheel. The model is loaded the way TensorFlow Serving
 * loads it: `TF_LoadSessionFromSavedModel` (the C++ SavedModel loader) with the "serve"
 * tag, after the tensorflow-text op libraries are registered with `TF_LoadLibrary`, and
 * with the session options the caller passes (a serialized ConfigProto; the Python side
 * turns XLA JIT off as the server does).
 *
 * Usage: c_api_loader EXPORT_DIR CONFIG_PROTO_HEX [OP_LIBRARY ...]
 *
 * Protocol (all integers little-endian, as on the host; one reply per request):
 *   string  := u64 length, bytes
 *   tensor  := u32 TF_DataType, u32 rank, i64 dims[rank], then for TF_STRING one string
 *              per element, otherwise u64 byte count and the raw row-major bytes
 *   status  := u32 TF_Code, string message
 * On start the program writes: u32 library count, a status per library, then the status
 * of loading the SavedModel (the program exits after a failed load).
 * Requests start with a u32 command:
 *   1 RUN:       u32 n feeds, (string name "op:index", tensor) * n, u32 n fetches,
 *                string name * n  ->  status, and when OK u32 n, tensor * n
 *   2 LOAD_TEST: u32 clients, u32 requests per client, then a RUN request's body
 *                ->  status (of the request's parsing), u32 failures, u32 n, f64 ms * n,
 *                    status of the first failure (OK when none)
 *   3 HAS_OPS:   u32 n, string op name * n  ->  u32 n, u8 registered * n
 *   4 QUIT
 * A failing TF_SessionRun answers with its status; the program keeps serving.
 */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tensorflow/c/c_api.h"
#include "tensorflow/c/tf_tstring.h"

enum { CMD_RUN = 1, CMD_LOAD_TEST = 2, CMD_HAS_OPS = 3, CMD_QUIT = 4 };

static FILE* in_stream;
static FILE* out_stream;
static TF_Graph* graph;
static TF_Session* session;

/* ---------------------------------------------------------------- framing */

static void read_exact(void* buffer, size_t size) {
  if (size > 0 && fread(buffer, 1, size, in_stream) != size) exit(0); /* peer gone */
}

static uint32_t read_u32(void) {
  uint32_t value;
  read_exact(&value, sizeof value);
  return value;
}

static uint64_t read_u64(void) {
  uint64_t value;
  read_exact(&value, sizeof value);
  return value;
}

static void* checked_malloc(size_t size) {
  void* pointer = malloc(size > 0 ? size : 1);
  if (pointer == NULL) {
    fprintf(stderr, "c_api_loader: out of memory (%zu bytes)\n", size);
    exit(2);
  }
  return pointer;
}

/* Reads a string into a new NUL-terminated buffer; `length` receives its size. */
static char* read_string(size_t* length) {
  uint64_t size = read_u64();
  char* text = checked_malloc((size_t)size + 1);
  read_exact(text, (size_t)size);
  text[size] = '\0';
  if (length != NULL) *length = (size_t)size;
  return text;
}

static void write_exact(const void* buffer, size_t size) {
  if (size > 0 && fwrite(buffer, 1, size, out_stream) != size) exit(0);
}

static void write_u32(uint32_t value) { write_exact(&value, sizeof value); }

static void write_u64(uint64_t value) { write_exact(&value, sizeof value); }

static void write_string(const char* text, size_t length) {
  write_u64(length);
  write_exact(text, length);
}

static void write_status(TF_Code code, const char* message) {
  write_u32((uint32_t)code);
  write_string(message, strlen(message));
}

/* ---------------------------------------------------------------- tensors */

static int64_t element_count(const int64_t* dims, int rank) {
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) count *= dims[i];
  return count;
}

static void delete_tensor(TF_Tensor* tensor) {
  if (tensor == NULL) return;
  if (TF_TensorType(tensor) == TF_STRING) {
    /* Tensors made here own their strings; TF_DeleteTensor does not free them. */
    TF_TString* strings = (TF_TString*)TF_TensorData(tensor);
    int64_t count = TF_TensorElementCount(tensor);
    for (int64_t i = 0; i < count; ++i) TF_StringDealloc(&strings[i]);
  }
  TF_DeleteTensor(tensor);
}

/* Reads one tensor. On a malformed tensor, consumes it, sets `error` and returns NULL. */
static TF_Tensor* read_tensor(char* error, size_t error_size) {
  TF_DataType dtype = (TF_DataType)read_u32();
  uint32_t rank = read_u32();
  int64_t* dims = checked_malloc(sizeof(int64_t) * rank);
  read_exact(dims, sizeof(int64_t) * rank);
  int valid_dims = 1;
  for (uint32_t i = 0; i < rank; ++i) valid_dims &= dims[i] >= 0;
  int64_t count = valid_dims ? element_count(dims, (int)rank) : 0;
  TF_Tensor* tensor = NULL;
  if (dtype == TF_STRING) {
    tensor = valid_dims ? TF_AllocateTensor(TF_STRING, dims, (int)rank,
                                            sizeof(TF_TString) * (size_t)count)
                        : NULL;
    TF_TString* strings = tensor ? (TF_TString*)TF_TensorData(tensor) : NULL;
    for (int64_t i = 0; i < count; ++i) {
      size_t length;
      char* text = read_string(&length);
      if (strings != NULL) {
        TF_StringInit(&strings[i]);
        TF_StringCopy(&strings[i], text, length);
      }
      free(text);
    }
    if (tensor == NULL) snprintf(error, error_size, "malformed string tensor");
  } else {
    uint64_t size = read_u64();
    size_t element_size = TF_DataTypeSize(dtype);
    if (valid_dims && element_size > 0 && size == element_size * (uint64_t)count) {
      tensor = TF_AllocateTensor(dtype, dims, (int)rank, (size_t)size);
    }
    if (tensor != NULL) {
      read_exact(TF_TensorData(tensor), (size_t)size);
    } else {
      char* skipped = checked_malloc((size_t)size);
      read_exact(skipped, (size_t)size);
      free(skipped);
      snprintf(error, error_size,
               "malformed tensor: dtype %d, %llu bytes for %lld elements", (int)dtype,
               (unsigned long long)size, (long long)count);
    }
  }
  free(dims);
  return tensor;
}

static void write_tensor(const TF_Tensor* tensor) {
  TF_DataType dtype = TF_TensorType(tensor);
  int rank = TF_NumDims(tensor);
  write_u32((uint32_t)dtype);
  write_u32((uint32_t)rank);
  for (int i = 0; i < rank; ++i) {
    int64_t dim = TF_Dim(tensor, i);
    write_exact(&dim, sizeof dim);
  }
  if (dtype == TF_STRING) {
    const TF_TString* strings = (const TF_TString*)TF_TensorData(tensor);
    int64_t count = TF_TensorElementCount(tensor);
    for (int64_t i = 0; i < count; ++i) {
      write_string(TF_StringGetDataPointer(&strings[i]), TF_StringGetSize(&strings[i]));
    }
  } else {
    size_t size = TF_TensorByteSize(tensor);
    write_u64(size);
    write_exact(TF_TensorData(tensor), size);
  }
}

/* ---------------------------------------------------------------- requests */

typedef struct {
  int num_feeds;
  TF_Output* feeds;
  TF_Tensor** feed_values;
  int num_fetches;
  TF_Output* fetches;
  TF_Code error_code; /* TF_OK when the request is well formed */
  char error[512];
} Request;

/* Resolves "op:index" (":0" when absent) in the loaded graph. */
static int resolve_output(const char* name, TF_Output* output, Request* request) {
  char* op_name = strdup(name);
  long index = 0;
  char* colon = strrchr(op_name, ':');
  if (colon != NULL) {
    char* end;
    index = strtol(colon + 1, &end, 10);
    if (*end == '\0' && end != colon + 1) *colon = '\0';
    else index = 0;
  }
  TF_Operation* operation = TF_GraphOperationByName(graph, op_name);
  free(op_name);
  if (operation == NULL || index < 0 || index >= TF_OperationNumOutputs(operation)) {
    if (request->error_code == TF_OK) {
      request->error_code = TF_INVALID_ARGUMENT;
      snprintf(request->error, sizeof request->error,
               "Tensor %s is not an element of this graph.", name);
    }
    return 0;
  }
  output->oper = operation;
  output->index = (int)index;
  return 1;
}

static void read_request(Request* request) {
  memset(request, 0, sizeof *request);
  request->error_code = TF_OK;
  request->num_feeds = (int)read_u32();
  request->feeds = checked_malloc(sizeof(TF_Output) * request->num_feeds);
  request->feed_values = checked_malloc(sizeof(TF_Tensor*) * request->num_feeds);
  for (int i = 0; i < request->num_feeds; ++i) {
    char* name = read_string(NULL);
    resolve_output(name, &request->feeds[i], request);
    free(name);
    char error[256] = "";
    request->feed_values[i] = read_tensor(error, sizeof error);
    if (request->feed_values[i] == NULL && request->error_code == TF_OK) {
      request->error_code = TF_INVALID_ARGUMENT;
      snprintf(request->error, sizeof request->error, "%s", error);
    }
  }
  request->num_fetches = (int)read_u32();
  request->fetches = checked_malloc(sizeof(TF_Output) * request->num_fetches);
  for (int i = 0; i < request->num_fetches; ++i) {
    char* name = read_string(NULL);
    resolve_output(name, &request->fetches[i], request);
    free(name);
  }
}

static void free_request(Request* request) {
  for (int i = 0; i < request->num_feeds; ++i) delete_tensor(request->feed_values[i]);
  free(request->feeds);
  free(request->feed_values);
  free(request->fetches);
}

/* Runs the request once; returns the status (caller deletes) and fills `outputs`. */
static TF_Status* run_request(const Request* request, TF_Tensor** outputs) {
  TF_Status* status = TF_NewStatus();
  for (int i = 0; i < request->num_fetches; ++i) outputs[i] = NULL;
  TF_SessionRun(session, NULL, request->feeds, request->feed_values, request->num_feeds,
                request->fetches, outputs, request->num_fetches, NULL, 0, NULL, status);
  return status;
}

static void handle_run(void) {
  Request request;
  read_request(&request);
  if (request.error_code != TF_OK) {
    write_status(request.error_code, request.error);
  } else {
    TF_Tensor** outputs = checked_malloc(sizeof(TF_Tensor*) * request.num_fetches);
    TF_Status* status = run_request(&request, outputs);
    write_status(TF_GetCode(status), TF_Message(status));
    if (TF_GetCode(status) == TF_OK) {
      write_u32((uint32_t)request.num_fetches);
      for (int i = 0; i < request.num_fetches; ++i) write_tensor(outputs[i]);
    }
    for (int i = 0; i < request.num_fetches; ++i) {
      if (outputs[i] != NULL) TF_DeleteTensor(outputs[i]);
    }
    TF_DeleteStatus(status);
    free(outputs);
  }
  free_request(&request);
}

/* ---------------------------------------------------------------- load test */

typedef struct {
  const Request* request;
  int requests;
  double* latencies_ms;
  int failures;
  TF_Code first_code;
  char first_error[512];
} Client;

static double now_ms(void) {
  struct timespec time;
  clock_gettime(CLOCK_MONOTONIC, &time);
  return time.tv_sec * 1e3 + time.tv_nsec * 1e-6;
}

static void* run_client(void* argument) {
  Client* client = argument;
  TF_Tensor** outputs = checked_malloc(sizeof(TF_Tensor*) * client->request->num_fetches);
  for (int r = 0; r < client->requests; ++r) {
    double start = now_ms();
    TF_Status* status = run_request(client->request, outputs);
    client->latencies_ms[r] = now_ms() - start;
    if (TF_GetCode(status) != TF_OK) {
      if (client->failures++ == 0) {
        client->first_code = TF_GetCode(status);
        snprintf(client->first_error, sizeof client->first_error, "%s", TF_Message(status));
      }
    }
    for (int i = 0; i < client->request->num_fetches; ++i) {
      if (outputs[i] != NULL) TF_DeleteTensor(outputs[i]);
    }
    TF_DeleteStatus(status);
  }
  free(outputs);
  return NULL;
}

static void handle_load_test(void) {
  int num_clients = (int)read_u32();
  int per_client = (int)read_u32();
  Request request;
  read_request(&request);
  if (request.error_code != TF_OK || num_clients < 1 || per_client < 1) {
    write_status(request.error_code != TF_OK ? request.error_code : TF_INVALID_ARGUMENT,
                 request.error_code != TF_OK ? request.error
                                             : "clients and requests must be positive");
    free_request(&request);
    return;
  }
  Client* clients = checked_malloc(sizeof(Client) * num_clients);
  pthread_t* threads = checked_malloc(sizeof(pthread_t) * num_clients);
  double* latencies = checked_malloc(sizeof(double) * num_clients * per_client);
  for (int c = 0; c < num_clients; ++c) {
    memset(&clients[c], 0, sizeof clients[c]);
    clients[c].request = &request;
    clients[c].requests = per_client;
    clients[c].latencies_ms = latencies + (size_t)c * per_client;
    clients[c].first_code = TF_OK;
  }
  int started = 0;
  for (; started < num_clients; ++started) {
    if (pthread_create(&threads[started], NULL, run_client, &clients[started]) != 0) break;
  }
  for (int c = 0; c < started; ++c) pthread_join(threads[c], NULL);
  if (started < num_clients) {
    write_status(TF_RESOURCE_EXHAUSTED, "could not start the client threads");
  } else {
    int failures = 0;
    const Client* first_failed = NULL;
    for (int c = 0; c < num_clients; ++c) {
      failures += clients[c].failures;
      if (first_failed == NULL && clients[c].failures > 0) first_failed = &clients[c];
    }
    write_status(TF_OK, "");
    write_u32((uint32_t)failures);
    write_u32((uint32_t)(num_clients * per_client));
    write_exact(latencies, sizeof(double) * num_clients * per_client);
    if (first_failed != NULL) write_status(first_failed->first_code, first_failed->first_error);
    else write_status(TF_OK, "");
  }
  free(latencies);
  free(threads);
  free(clients);
  free_request(&request);
}

/* ---------------------------------------------------------------- op registry */

static void handle_has_ops(void) {
  uint32_t count = read_u32();
  write_u32(count);
  for (uint32_t i = 0; i < count; ++i) {
    char* name = read_string(NULL);
    TF_Buffer* op_def = TF_NewBuffer();
    TF_Status* status = TF_NewStatus();
    TF_GraphGetOpDef(graph, name, op_def, status);
    uint8_t registered = TF_GetCode(status) == TF_OK;
    write_exact(&registered, 1);
    TF_DeleteStatus(status);
    TF_DeleteBuffer(op_def);
    free(name);
  }
}

/* ---------------------------------------------------------------- start */

static int hex_value(char digit) {
  if (digit >= '0' && digit <= '9') return digit - '0';
  if (digit >= 'a' && digit <= 'f') return digit - 'a' + 10;
  if (digit >= 'A' && digit <= 'F') return digit - 'A' + 10;
  return -1;
}

static int load_model(const char* export_dir, const char* config_hex) {
  size_t hex_length = strlen(config_hex);
  size_t config_size = hex_length / 2;
  unsigned char* config = checked_malloc(config_size);
  int valid = hex_length % 2 == 0;
  for (size_t i = 0; valid && i < config_size; ++i) {
    int high = hex_value(config_hex[2 * i]), low = hex_value(config_hex[2 * i + 1]);
    valid = high >= 0 && low >= 0;
    config[i] = (unsigned char)(high * 16 + low);
  }
  TF_Status* status = TF_NewStatus();
  TF_SessionOptions* options = TF_NewSessionOptions();
  if (!valid) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "CONFIG_PROTO_HEX is not a hex string");
  } else {
    TF_SetConfig(options, config, config_size, status);
  }
  free(config);
  if (TF_GetCode(status) == TF_OK) {
    const char* tags[] = {"serve"};
    graph = TF_NewGraph();
    session = TF_LoadSessionFromSavedModel(options, NULL, export_dir, tags, 1, graph, NULL,
                                           status);
  }
  int ok = TF_GetCode(status) == TF_OK;
  write_status(TF_GetCode(status), TF_Message(status));
  TF_DeleteStatus(status);
  TF_DeleteSessionOptions(options);
  return ok;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s EXPORT_DIR CONFIG_PROTO_HEX [OP_LIBRARY ...]\n", argv[0]);
    return 64;
  }
  /* Replies go to the original stdout; anything a library prints goes to stderr. */
  int reply_fd = dup(STDOUT_FILENO);
  dup2(STDERR_FILENO, STDOUT_FILENO);
  out_stream = fdopen(reply_fd, "wb");
  in_stream = stdin;

  write_u32((uint32_t)(argc - 3));
  for (int i = 3; i < argc; ++i) {
    TF_Status* status = TF_NewStatus();
    TF_LoadLibrary(argv[i], status); /* the handle stays loaded for the process */
    write_status(TF_GetCode(status), TF_Message(status));
    TF_DeleteStatus(status);
  }
  int loaded = load_model(argv[1], argv[2]);
  fflush(out_stream);
  if (!loaded) return 1;

  for (;;) {
    uint32_t command = read_u32();
    if (command == CMD_RUN) handle_run();
    else if (command == CMD_LOAD_TEST) handle_load_test();
    else if (command == CMD_HAS_OPS) handle_has_ops();
    else if (command == CMD_QUIT) break;
    else {
      fprintf(stderr, "c_api_loader: unknown command %u\n", command);
      return 65;
    }
    fflush(out_stream);
  }
  TF_Status* status = TF_NewStatus();
  TF_CloseSession(session, status);
  TF_DeleteSession(session, status);
  TF_DeleteStatus(status);
  TF_DeleteGraph(graph);
  return 0;
}
