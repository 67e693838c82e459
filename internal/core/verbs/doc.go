// Package verbs declares the values of the verbs API once: the work requests,
// completions and attributes a program fills in and reads, and the
// enumerations of libibverbs with their C values. It is the vocabulary every
// layer shares, as gVisor's tcpip package is for its netstack: the queues
// (cq, srq) and the engine (transport) store these types, and package roce,
// which programs import, names each of them again with an alias, so a value
// crosses from the program to the engine without a conversion or a copy.
//
// A field's comment names the C field it stands for and says what C leaves
// unsaid; the C names are libibverbs' (struct ibv_send_wr, enum ibv_wc_status).
package verbs
